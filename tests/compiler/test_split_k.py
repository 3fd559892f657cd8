"""Split K (ADR-0712): an integer GEMM whose output tiles cannot fill the PEs cuts each
tile's K steps over several PEs; helpers store int32 partial sums, the owner adds them.

The tiler takes it only when its estimate says so; the program stays exact (the interpreter
and onnxruntime agree with it), and the simulator runs it faster than the same GEMM with
split K removed from the candidates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernbench.cli import main
from kernbench.cmdq.io import unfused
from kernbench.compiler import tiling
from kernbench.compiler.tiling import GemmTiles, choose_gemm_tiles

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import int8_gemm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_quantized_graphs import _dynamic_model  # noqa: E402

#: base's PE: 32×32 output-stationary array, 256 KiB banks, 1.5 MiB allocatable TCM
BASE = dict(a_bytes=1, w_bytes=1, bank_bytes=256 * 1024, tcm_bytes=1536 * 1024, rows=32,
            cols=32, dataflow="os", dma_bytes_per_cycle=62.5, dma_fixed_cycles=150.0)


def test_k_parts_cover_k_in_whole_steps():
    for k, tk, ks in [(3072, 512, 2), (3072, 1024, 3), (1000, 128, 4), (768, 256, 2)]:
        parts = GemmTiles(32, 32, tk, ks).k_parts(k)
        assert len(parts) == ks and parts[0][0] == 0 and parts[-1][1] == k
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
        assert all(lo % tk == 0 and hi > lo for lo, hi in parts)


def test_a_one_row_gemm_with_long_k_splits_and_a_large_one_does_not():
    one_row = choose_gemm_tiles(1, 768, 3072, n_pes=64, split_k=True, **BASE)
    assert one_row.ks > 1  # 24 output tiles cannot fill 64 PEs
    assert choose_gemm_tiles(1, 768, 3072, n_pes=64, split_k=False, **BASE).ks == 1
    # enough output tiles for every PE: nothing to gain
    assert choose_gemm_tiles(2048, 768, 3072, n_pes=16, split_k=True, **BASE).ks == 1
    # a short K has too few steps to cut
    assert choose_gemm_tiles(1, 64, 32, n_pes=64, split_k=True, **BASE).ks == 1


def _run(model: Path, out: Path, *extra: str) -> dict:
    code = main(["run", str(model), "-t", "base", "--all-pes", "--verify", "--keep-bundle",
                 "--no-trace", "--no-report", "--quiet", "--out", str(out), *extra])
    assert code == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    return json.loads((out / "stats.json").read_text())


def _gemm_entries(out: Path) -> list[dict]:
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    return [e for e in cmdq if (e.get("layer_id") or "").startswith(("gemm", "matmul"))]


@pytest.fixture
def q8(tmp_path: Path) -> Path:
    q = tmp_path / "q.yaml"
    q.write_text('overrides:\n  - {match: "*", activation: 8}\n')
    return q


def test_split_gemm_is_exact_and_faster(tmp_path, q8, monkeypatch):
    model = tmp_path / "g.onnx"
    onnx.save(int8_gemm(1, 768, 3072), model)
    split = _run(model, tmp_path / "split", "--qconfig", str(q8))
    entries = _gemm_entries(tmp_path / "split")
    # an owner's add may be a step of its fused epilogue (ADR-0724)
    adds = [e for e in unfused(entries) if e["opcode"] == "VE_ELEMENTWISE_TILE"]
    assert adds and all(e["op"] == "add" and e["out_dtype"] == "int32" for e in adds)
    te_pes = {e["pe"] for e in entries if e["opcode"] == "TE_GEMM_TILE"}
    stores = [e for e in entries if e["opcode"] == "DMA_STORE_TILE"]
    # every partial sum is added by an owner: one add per helper store of 32-bit data
    assert len(adds) == sum(1 for e in stores if e["qbits"] == 32) - 24
    assert len(te_pes) > 24  # more PEs than the 24 output tiles of 32 columns

    monkeypatch.setattr(tiling, "SPLIT_K", ())
    tiling.choose_gemm_tiles.cache_clear()
    try:
        whole = _run(model, tmp_path / "whole", "--qconfig", str(q8))
    finally:
        tiling.choose_gemm_tiles.cache_clear()
    whole_entries = _gemm_entries(tmp_path / "whole")
    assert not [e for e in unfused(whole_entries) if e["opcode"] == "VE_ELEMENTWISE_TILE"]
    assert split["total_ns"] < whole["total_ns"]


def test_split_gemm_with_zero_points_is_exact(tmp_path):
    """MatMulInteger with zero points on both sides: the activation's column term is the
    bias of the first K step only, so the partial sums still add up to the exact int32."""
    model = tmp_path / "dyn.onnx"
    _dynamic_model(model, 3, 1, k=3072, n=768)
    x = (np.random.default_rng(5).standard_normal((1, 1, 3072)) + 1.5).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    _run(model, tmp_path / "out", "--inputs", str(tmp_path / "in.npz"))
    entries = json.loads((tmp_path / "out" / "bundle" / "cmdq.json").read_text())["cmdq"]
    te = [e for e in entries if e["opcode"] == "TE_GEMM_TILE"]
    # the owner's int32 add of a partial sum: an entry, or a step of a fused chain
    assert any(e["opcode"] == "VE_ELEMENTWISE_TILE" and e.get("out_dtype") == "int32"
               and e.get("op") == "add" for e in unfused(entries))
    # the zero-point term rides on the K = 0 steps only: one per output tile
    assert sum(1 for e in te if e.get("bias_bank") is not None) == 768 // 32
