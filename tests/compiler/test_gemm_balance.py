"""Split-K parts sized by when PEs and K steps are ready (ADR-0729).

`balanced_parts` on its own (every K step of every tile placed once, contiguous parts, one
owner a tile, the busier PEs given less), and a one-row MLP end to end: FC1's second
wave of tiles makes FC2 place its K steps unevenly; the program stays exact and runs
faster than with equal parts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cmdq.io import unfused
from kernbench.compiler.lower import gemm_balance
from kernbench.compiler.lower.gemm_balance import (
    KPart,
    Producer,
    balanced_parts,
    equal_parts_end,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_split_k import _run as split_k_run  # noqa: E402

TK, K, COST = 512, 3072, 600


def _producer() -> Producer:
    """64 PEs after a 96-tile producer: PEs 0-31 ran two 32-column tiles (1000 cycles
    each), PEs 32-63 one; K rows [32j, 32j + 32) come from tile j."""
    p = Producer(frozenset({"h"}))
    for j in range(96):
        wave = j // 64
        p.cols.append((32 * j, 32 * j + 32, 1000 * (wave + 1)))
    p.busy = {pe: 2000 if pe < 32 else 1000 for pe in range(64)}
    return p


def _equal(tiles: list) -> dict[int, list[KPart]]:
    """The round robin: each tile in two halves on consecutive PEs from PE 0."""
    out: dict[int, list[KPart]] = {}
    for i, t in enumerate(tiles):
        out[2 * i] = [KPart(t, 0, K // 2, -1)]
        out[2 * i + 1] = [KPart(t, K // 2, K, 0)]
    return out


def test_balanced_parts_place_every_step_once_and_end_sooner():
    tiles = [(0, 32 * i, 1, 32) for i in range(24)]
    prod = _producer()
    placed, end = balanced_parts(tiles, K, TK, list(range(64)), prod, COST)
    steps: dict[tuple, list[int]] = {}
    for parts in placed.values():
        for p in parts:
            assert p.k0 % TK == 0 and p.k1 > p.k0
            steps.setdefault(p.tile, []).extend(range(p.k0 // TK, -(-p.k1 // TK)))
    assert sorted(steps) == tiles
    assert all(sorted(s) == list(range(K // TK)) for s in steps.values())
    for t in tiles:
        mine = [p for parts in placed.values() for p in parts if p.tile == t]
        assert [p.slot for p in mine].count(-1) == 1  # one owner
        assert sorted(p.slot for p in mine if p.slot >= 0) == list(range(len(mine) - 1))
        assert all(p.parts == len(mine) for p in mine)
    assert end < equal_parts_end(_equal(tiles), TK, prod, COST)
    # a PE that was busy longer is given no more K steps than one that was free sooner
    units = {pe: sum((p.k1 - p.k0) // TK for p in parts) for pe, parts in placed.items()}
    assert max(units.get(pe, 0) for pe in range(32)) <= min(units.get(pe, 0)
                                                            for pe in range(32, 64))


def test_the_estimate_follows_readiness():
    """Units whose inputs come late do not start before they are ready."""
    tiles = [(0, 0, 1, 32)]
    prod = Producer(frozenset({"h"}), busy={0: 0, 1: 0},
                    cols=[(0, TK, 0), (TK, 2 * TK, 5000)])
    _, end = balanced_parts(tiles, 2 * TK, TK, [0, 1], prod, COST)
    assert end == 5000 + COST


def _mlp(path: Path, d: int = 768, f: int = 3072) -> None:
    """y = gelu(x @ W1) @ W2, one row: FC1 has f / 32 tiles and stores its GELU's output
    as the int8 copy FC2 reads (ADR-0719), FC2 has a K of f."""
    r = np.random.default_rng(3)
    w1 = (r.standard_normal((d, f)) * 0.03).astype(np.float32)
    w2 = (r.standard_normal((f, d)) * 0.02).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
         helper.make_node("Gelu", ["h"], ["a"], name="gelu"),
         helper.make_node("MatMul", ["a", "w2"], ["y"], name="fc2")], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)],
                                ir_version=9), path)


def _run(model: Path, out: Path) -> tuple[dict, list[dict]]:
    """stats and program of a verified run (`test_split_k._run`: exact against the
    interpreter, within tolerance of onnxruntime)."""
    stats = split_k_run(model, out)
    return stats, json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]


@pytest.mark.parametrize("d,f", [(768, 3072)])
def test_a_one_row_mlp_balances_its_split_k(tmp_path, monkeypatch, d, f):
    model = tmp_path / "mlp.onnx"
    _mlp(model, d, f)
    stats, cmdq = _run(model, tmp_path / "balanced")
    nodes = json.loads((tmp_path / "balanced" / "bundle" / "ir.json").read_text())["graph"][
        "nodes"]
    second = [n["id"] for n in nodes if n["op_type"] == "GEMM"][-1]
    fc2 = [e for e in unfused(cmdq) if e.get("layer_id") == second
           and e["opcode"] == "TE_GEMM_TILE"]
    assert fc2, "FC2 runs split K"
    per_pe: dict[int, int] = {}
    for e in fc2:
        per_pe[e["pe"]] = per_pe.get(e["pe"], 0) + 1
    assert len(set(per_pe.values())) > 1  # uneven parts
    # an owner with several helpers loads their partial sums with one strided DMA
    assert any(e["opcode"] == "DMA_LOAD_TILE" and e.get("layer_id") == second
               and e.get("rows", 1) > 1 and e["qbits"] == 32 for e in cmdq)
    monkeypatch.setattr(gemm_balance, "BALANCE", False)
    equal, _ = _run(model, tmp_path / "equal")
    assert stats["total_ns"] < equal["total_ns"]
