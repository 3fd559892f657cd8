"""KV bits and attention blocked along the KV sequence, through the whole stack, and the
TCM allocator's write-after-read record (ADR-0704). Every run is `kernbench run --verify`:
exact against the interpreter on the compiled IR, within the mode's tolerance against
onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.cmdq.io import unfused
from kernbench.report.layer_ops import layer_op_census_of_bundle

#: a 64 KiB TCM (8 KiB banks): the K of a 600-token cache (601 × 16 int8) needs blocks
SMALL_TCM = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
             "--set", "cube.pe_template.pe_tcm.reserved_kib=16"]


def _run(tmp_path: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[dict, Path]:
    out = tmp_path / "out"
    code = main(["run", *args, "--verify", "--keep-bundle", "--out", str(out), "--no-trace",
                 "--no-report", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    return v, out / "bundle"


def _cmdq(bundle: Path) -> list[dict]:
    """The program's entries, fused chains as their steps."""
    return unfused(json.loads((bundle / "cmdq.json").read_text())["cmdq"])


def test_long_cache_is_blocked_and_exact(tmp_path, capsys):
    # (before the TCM allocator kept partially reused dead buffers as hazards, this run
    # diverged from the interpreter). On `small` a decode step also splits the keys over
    # 2 PEs (ADR-0714): each range of 600 keys still needs blocks.
    _, bundle = _run(tmp_path, capsys, "llama", "--kv-len", "1200", *SMALL_TCM)
    ir = json.loads((bundle / "ir.json").read_text())
    attn = [n["attributes"] for n in ir["graph"]["nodes"] if n["op_type"] == "ATTENTION"]
    blocks = [a["kv_block"] for a in attn]
    assert blocks and all(0 < b < 600 for b in blocks)
    assert {a.get("kv_parts", 1) for a in attn} == {2}
    entries = _cmdq(bundle)
    ops = [e["opcode"] for e in entries]
    # one online-softmax step per (KV group, KV block of a range), the group's 2 query
    # heads packed a row each (ADR-1285): 2 groups x 2 layers x ceil(600 / block) for
    # each range of 1201 keys (601 + 600)
    per_group = -(-601 // blocks[0]) + -(-600 // blocks[0])
    assert ops.count("VE_SOFTMAX_BLOCK_TILE") == 4 * per_group
    assert ops.count("VE_ATTN_MERGE_TILE") == ops.count("VE_SOFTMAX_BLOCK_TILE")
    # the owner folds the other range in once per group
    assert ops.count("VE_ATTN_COMBINE_TILE") == 4
    assert {e["rows"] for e in entries if e["opcode"] in (
        "VE_SOFTMAX_BLOCK_TILE", "VE_ATTN_MERGE_TILE", "VE_ATTN_COMBINE_TILE")} == {2}
    assert "TE_LAYER_OP" not in ops


def test_short_cache_is_not_blocked(tmp_path, capsys):
    _, bundle = _run(tmp_path, capsys, "llama", "--kv-len", "16")
    ir = json.loads((bundle / "ir.json").read_text())
    assert not any("kv_block" in n["attributes"] for n in ir["graph"]["nodes"])
    assert "VE_SOFTMAX_BLOCK_TILE" not in {e["opcode"] for e in _cmdq(bundle)}


def test_kv4_cache_is_packed_and_tiled(tmp_path, capsys):
    q = tmp_path / "kv4.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 4}\n")
    v, bundle = _run(tmp_path, capsys, "llama", "--kv-len", "64", "--qconfig", str(q))
    assert any("W8A8KV4" in c["threshold"] for c in v["checks"])
    mem = json.loads((bundle / "memory.json").read_text())["tensors"]
    key = mem["present.0.key"]
    assert key["dtype"] == "int4" and key["nbytes"] == 1 * 2 * 65 * 16 // 2
    census = layer_op_census_of_bundle(bundle)
    assert not any(k.startswith(("attention", "kv_update")) for k in census.layers)
    kv_dmas = [e for e in _cmdq(bundle) if e.get("tensor_role") == "kv"]
    assert kv_dmas and all(e["qbits"] == 4 for e in kv_dmas
                           if e["layer_id"].startswith("attention"))


def test_kv4_blocked_is_exact(tmp_path, capsys):
    q = tmp_path / "kv4.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 4}\n")
    # packed: 1201 × 16 / 2 bytes of K per head is more than an 8 KiB bank
    _, bundle = _run(tmp_path, capsys, "llama", "--kv-len", "1200", "--qconfig", str(q),
                     *SMALL_TCM)
    assert "VE_SOFTMAX_BLOCK_TILE" in {e["opcode"] for e in _cmdq(bundle)}
