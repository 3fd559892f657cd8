"""Float attention whose K / V of one head do not fit a TCM bank is tiled along the KV
sequence (issue 36, ADR-0945): fp16 / bf16 decode steps at a long KV cache (and fp32 ones,
which stopped the compile) run the online-softmax KV-block loop on many PEs instead of
one whole-layer op, and verify against the interpreter and onnxruntime within the float
tolerances of docs/verification.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
QCONFIGS = ROOT / "examples" / "qconfig"


@pytest.mark.parametrize(("model", "fmt"), [("gpt2", "bf16"), ("llama", "fp16"),
                                             ("llama", "bfp8"), ("gpt2", "fp32")])
def test_long_kv_float_attention_is_blocked_and_verifies(tmp_path, capsys, model, fmt):
    q = QCONFIGS / f"{fmt}.yaml"
    if fmt == "fp32":
        q = tmp_path / "fp32.yaml"
        q.write_text("default: {weight: fp32, activation: fp32, kv: fp32}\n")
    out = tmp_path / "o"
    code = main(["run", model, "--kv-len", "4096", "--qconfig", str(q), "--verify",
                 "--quiet", "--keep-bundle", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "whole-layer ops" not in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]
    att = [e for e in cmdq if (e.get("layer_id") or "").startswith("attention")]
    blocks = [e for e in att if e["opcode"] == "VE_SOFTMAX_BLOCK_TILE"]
    # 4096 + 1 keys in blocks of at most a bank's half: more than one block per head
    assert len(blocks) >= 2 * len({e["pe"] for e in blocks}), len(blocks)
    merges = [e for e in att if e["opcode"] == "VE_ATTN_MERGE_TILE"]
    assert merges and all(e["in_dtype"] == "float32" for e in merges)
    assert len({e["pe"] for e in att if e["opcode"] == "TE_GEMM_TILE"}) > 1
    v = json.loads((out / "verification.json").read_text())
    refs = {c["reference"] for c in v["checks"]}
    assert v["ok"] and refs == {"interpreter", "onnxruntime"}, v["checks"]
