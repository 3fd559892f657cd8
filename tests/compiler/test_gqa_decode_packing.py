"""A decode step packs a KV group's query heads into one block (ADR-1285): one Q·Kᵀ and one
P·V of `rep` rows per (batch, KV group) instead of `rep` one-row products, exact against
the interpreter; a prefill (several query rows a head) keeps one block per head."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernbench.cli import main
from kernbench.cmdq.io import unfused

ROOT = Path(__file__).resolve().parents[2]
# a decoder with its past KV cache and an attention mask: 2 layers, 4 query heads over 2
# KV heads (tests/models/hf_decoders/README.md)
EXPORT = ROOT / "tests" / "models" / "hf_decoders" / "llama_legacy.onnx"
LAYERS, HEADS, KV_HEADS = 2, 4, 2


def _inputs(tmp_path: Path, batch: int, past: int) -> Path:
    """Decode inputs whose attention mask hides the first 5 cached tokens of every
    sequence but the first (left padding), so that a query row given the wrong mask row
    would attend to them and differ from the interpreter."""
    rng = np.random.default_rng(7)
    mask = np.ones((batch, past + 1), np.int64)
    mask[1:, :5] = 0
    arrays = {"input_ids": rng.integers(0, 512, (batch, 1), dtype=np.int64),
              "attention_mask": mask,
              "position_ids": (mask.sum(axis=1, keepdims=True) - 1).astype(np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            arrays[f"past_key_values.{i}.{kv}"] = rng.normal(
                0, 1, (batch, KV_HEADS, past, 16)).astype(np.float32)
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    return path


def _run(tmp_path: Path, capsys, *args: str, model: Path = EXPORT,
         topology: str = "small") -> list[dict]:
    out = tmp_path / "out"
    code = main(["run", str(model), "-t", topology, "--verify", "--keep-bundle", "--quiet",
                 "--no-report", "--out", str(out), *args])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    checks = [c for c in v["checks"] if c["reference"] == "interpreter"]
    assert checks and all(c["max_abs_err"] == 0 for c in checks)
    return unfused(json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"])


def _scores(cmdq: list[dict]) -> list[dict]:
    """The attention's Q·Kᵀ products (the TE tiles that read K transposed)."""
    return [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE" and e.get("transpose_wgt")]


@pytest.mark.parametrize("qconfig", [None, "examples/qconfig/w4a16_kv8.yaml"],
                         ids=["w8a8", "a16"])
def test_decode_runs_one_block_per_kv_group(tmp_path, capsys, qconfig):
    batch = 2
    extra = ["--qconfig", str(ROOT / qconfig)] if qconfig else []
    cmdq = _run(tmp_path, capsys, "--batch", str(batch), "--seq-len", "1", "--kv-len", "20",
                "--inputs", str(_inputs(tmp_path, batch, 20)), *extra)
    scores = _scores(cmdq)
    assert len(scores) == LAYERS * batch * KV_HEADS
    assert {e["m"] for e in scores} == {HEADS // KV_HEADS}
    soft = [e for e in cmdq if e["opcode"] == "VE_SOFTMAX_TILE"]
    assert len(soft) == len(scores) and {e["rows"] for e in soft} == {HEADS // KV_HEADS}


def test_decode_with_kv_blocks_packs_the_heads_too(tmp_path, capsys):
    # A16 on 32 small banks: K / V of 5 001 keys do not fit one, so 2 048-key blocks
    batch, keys, blk = 2, 5001, 2048
    cmdq = _run(tmp_path, capsys, "--batch", str(batch), "--seq-len", "1", "--kv-len",
                str(keys - 1), "--qconfig", str(ROOT / "examples/qconfig/w4a16_kv8.yaml"),
                "--set", "cube.pe_template.pe_tcm.banks=32")
    steps = [e for e in cmdq if e["opcode"] == "VE_SOFTMAX_BLOCK_TILE"]
    assert len(steps) == LAYERS * batch * KV_HEADS * -(-keys // blk)
    assert {e["rows"] for e in steps} == {HEADS // KV_HEADS}


def test_decode_with_key_ranges_packs_the_heads_too(tmp_path, capsys):
    # on `base` the 601 keys of each group split into 4 ranges on PEs of their own: the
    # owner folds the 3 helpers' packed rows in with one combine a group
    cmdq = _run(tmp_path, capsys, "--batch", "1", "--seq-len", "1", "--kv-len", "600",
                topology="base")
    combines = [e for e in cmdq if e["opcode"] == "VE_ATTN_COMBINE_TILE"]
    assert len(combines) == LAYERS * KV_HEADS
    assert {(e["rows"], e["parts"]) for e in combines} == {(HEADS // KV_HEADS, 3)}


def test_key_ranges_of_unequal_length_decide_the_packing_together(tmp_path, capsys):
    """4-bit K / V of head dim 16 on 32 small banks: the 4 query rows' scores, not the
    keys, bind a bank, and the owner's range (4 128 keys) holds more keys than the
    helper's (4 096). Decided per range, the helper packed and the owner did not, and the
    helper read a one-row initial state four rows long (the data pass refused the
    program); decided once for the layer, neither packs and the run is exact."""
    from kernbench.models.builders import build_llama

    model = tmp_path / "gqa4.onnx"
    onnx.save(build_llama(n_layer=1, d=128, heads=8, kv_heads=2, ffn=64, seq=1,
                          kv_len=8223, vocab=64), str(model))
    qconfig = tmp_path / "kv4.yaml"
    qconfig.write_text("default:\n  weight: 8\n  activation: 8\n  kv: 4\n")
    cmdq = _run(tmp_path, capsys, "--qconfig", str(qconfig), "--set",
                "cube.pe_template.pe_tcm.banks=32", model=model)
    rows = {e["rows"] for e in cmdq if e["opcode"] in (
        "VE_SOFTMAX_BLOCK_TILE", "VE_SOFTMAX_TILE", "VE_ATTN_COMBINE_TILE")}
    assert rows == {1}


def test_a_prefill_keeps_one_block_per_head(tmp_path, capsys):
    seq = 3
    cmdq = _run(tmp_path, capsys, "--batch", "1", "--seq-len", str(seq), "--kv-len", "8")
    scores = _scores(cmdq)
    assert len(scores) == LAYERS * HEADS and {e["m"] for e in scores} == {seq}
