"""A decode step's KV_UPDATE writes a sequence's new rows of several heads with one load,
conversion and store when the step has more rows than PEs (`kv_rows.head_runs`), one head
a block otherwise; exact against the interpreter either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "tests" / "models" / "hf_decoders" / "llama_legacy.onnx"  # 2 KV heads of 16


@pytest.mark.parametrize(("batch", "heads_a_block"), [(16, 2), (1, 1)])
def test_new_rows_move_a_sequence_at_a_time(tmp_path, capsys, batch, heads_a_block):
    # `small` has 4 PEs: 16 sequences x 2 heads = 32 rows give blocks of both heads of a
    # sequence (at most 32 / 4 rows a block); 1 sequence keeps one head a block
    out = tmp_path / "out"
    code = main(["run", str(EXPORT), "-t", "small", "--batch", str(batch), "--seq-len", "1",
                 "--kv-len", "20", "--verify", "--keep-bundle", "--quiet", "--no-report",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    checks = [c for c in v["checks"] if c["reference"] == "interpreter"]
    assert checks and all(c["max_abs_err"] == 0 for c in checks)
    ir = json.loads((out / "bundle" / "ir.json").read_text())
    updates = {n["id"] for n in ir["graph"]["nodes"] if n["op_type"] == "KV_UPDATE"}
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    # the new rows' loads (the past rows move in blocks of whole heads, 20 rows or more;
    # a K / V whose projection stores its new rows itself has none here)
    loads = [e for e in cmdq if e.get("layer_id") in updates
             and e["opcode"] == "DMA_LOAD_TILE" and e["num_elements"] < 20 * 16]
    copying = {e["layer_id"] for e in loads}
    assert copying and {e["num_elements"] for e in loads} == {heads_a_block * 16}
    assert len(loads) == len(copying) * batch * 2 // heads_a_block
