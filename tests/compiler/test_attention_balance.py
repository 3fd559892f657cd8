"""A prefill attention's query blocks dealt out over every PE of a cube
(`lower/attention._query_runs`): 12 heads of 1 024 rows in 64-row blocks on `base` are
192 blocks for 64 PEs, 3 each, where chunks of whole cube segments left 16 PEs idle."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from kernbench.cli import main

HF = Path(__file__).resolve().parents[1] / "hf_configs"


def _attention_te_per_pe(tmp_path: Path, seq: int) -> collections.Counter:
    cfg = json.loads((HF / "tiny-gpt2.json").read_text())
    cfg.update(n_head=12, n_embd=768, n_layer=1)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / f"bundle{seq}"
    assert main(["compile", str(path), "--seq-len", str(seq), "-t", "base", "--out",
                 str(out), "--quiet"]) == 0
    cmdq = json.loads((out / "cmdq.json").read_text())["cmdq"]
    return collections.Counter(e["pe"] for e in cmdq if e.get("layer_id") == "l0.attn"
                               and e["opcode"] == "TE_GEMM_TILE")


def test_query_blocks_fill_every_pe(tmp_path):
    per_pe = _attention_te_per_pe(tmp_path, 1024)
    # Q·Kᵀ and P·V per block: 12 heads x 16 blocks x 2 over 64 PEs, 6 each
    assert len(per_pe) == 64
    assert set(per_pe.values()) == {6}


def test_short_prefill_keeps_its_chunks(tmp_path):
    # seq 128: one 32-row block per head and cube, 48 blocks for 64 PEs: nothing to deal
    per_pe = _attention_te_per_pe(tmp_path, 128)
    assert len(per_pe) == 48 and set(per_pe.values()) == {2}


def test_runs_spanning_two_heads_are_exact(tmp_path):
    # 6 PEs, 4 heads of 8 blocks: runs of 5-6 blocks, most spanning two heads (each
    # loads the K / V of both); the data pass stays exact against the interpreter
    out = tmp_path / "out"
    assert main(["run", "gpt2", "--seq-len", "256", "-t", "small",
                 "--set", "cube.mesh.cols=3",
                 "--set", "cube.pe_layout=[r0c0,r0c1,r0c2,r1c0,r1c1,r1c2]",
                 "--set", "cube.pe_template.pe_tcm.capacity_kib=256",
                 "--set", "cube.pe_template.pe_tcm.reserved_kib=64",
                 "--all-pes", "--verify", "--keep-bundle", "--no-trace", "--no-report",
                 "--quiet", "--out", str(out)]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"]
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    first = min(e["layer_id"] for e in cmdq if (e.get("layer_id") or "").startswith("attention"))
    per_pe = collections.Counter(e["pe"] for e in cmdq if e.get("layer_id") == first
                                 and e["opcode"] == "TE_GEMM_TILE")
    assert len(per_pe) == 6 and max(per_pe.values()) - min(per_pe.values()) <= 2
