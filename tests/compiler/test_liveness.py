"""HBM reuse by liveness: live ranges over the layer order, MemoryPlan.allocate(live=),
and the schedule's WAR/WAW edges on reused space (which a different storage key at the
same address would lose)."""

from __future__ import annotations

from types import SimpleNamespace

import onnx
import pytest

from kernbench.compiler.hbm import MemoryPlan, nbytes_of
from kernbench.compiler.liveness import live_ranges
from kernbench.compiler.schedule import Schedule
from kernbench.compiler.tilegraph import TileGraph, TileOp
from kernbench.ir import import_onnx
from kernbench.models.builders import build_gpt2


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):  # noqa: ANN201
    path = tmp_path_factory.mktemp("m") / "g.onnx"
    onnx.save(build_gpt2(n_layer=2, seq=8), str(path))
    return import_onnx(path)


def test_ranges_follow_producers_and_last_consumers(gpt2):
    g = gpt2
    r = live_ranges(g)
    pos = {n.id: i for i, n in enumerate(g.nodes)}
    for out in g.outputs:
        assert r[out][1] == len(g.nodes)  # graph outputs live to the end
    for n in g.nodes:
        if n.op_type in ("RESHAPE", "TRANSPOSE", "IDENTITY"):
            continue
        for o in n.outputs:
            if not o or o in g.outputs:
                continue
            readers = [pos[c] for c in g.tensors[o].consumers]
            assert r[o][0] <= pos[n.id]
            assert r[o][1] >= max(readers, default=pos[n.id])


def test_reuse_never_shares_bytes_between_live_tensors(gpt2):
    """Allocate every layer output in order with its range: tensors whose ranges overlap
    never share a byte (checked pairwise), and reuse saves space."""
    g = gpt2
    r = live_ranges(g)
    plan = MemoryPlan(1, 1 << 30)
    placed = []
    total = 0
    for n in g.nodes:
        for o in n.outputs:
            if not o or o not in r or o in plan.allocations:
                continue
            t = g.tensors[o]
            a = plan.allocate(o, t.shape, t.dtype, "intermediate", live=r[o])
            placed.append((o, a.addrs[0], a.addrs[0] + a.nbytes, r[o], a.key))
            total += nbytes_of(t.shape, t.dtype)
    plan.verify()
    for i, (t1, s1, e1, (f1, l1), _) in enumerate(placed):
        for t2, s2, e2, (f2, l2), _ in placed[i + 1:]:
            if s1 < e2 and s2 < e1:  # shared bytes: their lives must not overlap
                assert l1 < f2 or l2 < f1, (t1, t2)
    used = sum(a.nbytes for a in plan.allocations.values())
    assert used < total
    assert any(k != t for t, *_, k in placed)  # some tensor did reuse a dead storage


def _store(key: str, lo: int, hi: int) -> TileOp:
    return TileOp("DMA_STORE_TILE", 0, "l", {}, hbm_writes=[(key, lo, hi, hi - lo, hi - lo)])


def _load(key: str, lo: int, hi: int, pe: int = 1) -> TileOp:
    return TileOp("DMA_LOAD_TILE", pe, "l", {}, hbm_reads=[(key, lo, hi, hi - lo, hi - lo)])


def _schedule(ops: list[TileOp]) -> list[list[int]]:
    for i, op in enumerate(ops):
        op.index = i
    Schedule().apply(SimpleNamespace(require_tiles=lambda: TileGraph(ops=ops)))
    return [op.deps for op in ops]


def test_reused_space_keeps_war_and_waw_order():
    """A is written, read, then dead; B reuses its bytes. Through the plan B gets A's key,
    so B's store waits for A's read (WAR) and A's store (WAW). Under its own key at the
    same address (reuse without the plan's key), those edges would be missing: a race."""
    plan = MemoryPlan(1, 1 << 20)
    a = plan.allocate("A", (64,), "fp32", "intermediate", live=(0, 1))
    b = plan.allocate("B", (32,), "fp32", "intermediate", live=(2, 3))
    assert b.addrs == a.addrs and b.key == "A"
    lo = a.addrs[0]
    deps = _schedule([_store(a.key, lo, lo + 256), _load(a.key, lo, lo + 256),
                      _store(b.key, lo, lo + 128)])
    assert set(deps[2]) == {0, 1}
    racy = _schedule([_store("A", lo, lo + 256), _load("A", lo, lo + 256),
                      _store("B", lo, lo + 128)])
    assert racy[2] == []  # what the shared key prevents


def test_live_storage_is_not_reused():
    plan = MemoryPlan(1, 1 << 20)
    a = plan.allocate("A", (64,), "fp32", "intermediate", live=(0, 5))
    b = plan.allocate("B", (64,), "fp32", "intermediate", live=(3, 6))
    assert b.key == "B" and b.addrs[0] >= a.addrs[0] + a.nbytes


@pytest.mark.parametrize("builder", ["gpt2", "llama"])
def test_data_pass_exact_with_reuse(tmp_path, builder):
    """Reuse forced on a real model: storages are shared, and the data pass still matches
    the reference interpreter (verify), so the schedule ordered every reused byte."""
    from kernbench.compiler.pipeline import compile_graph, write_bundle
    from kernbench.compiler.state import CompileOptions
    from kernbench.host.flow import SimOptions, simulate_bundle
    from kernbench.models.builders import build_llama
    from kernbench.topology import load_topology

    path = tmp_path / "m.onnx"
    build = build_gpt2 if builder == "gpt2" else build_llama
    onnx.save(build(n_layer=2, seq=8), str(path))
    g = import_onnx(path)
    topo = load_topology("small")
    state, _ = compile_graph(g, topo, CompileOptions(reuse_hbm=True))
    plain, _ = compile_graph(import_onnx(path), topo, CompileOptions(reuse_hbm=False))
    # fewer storages and fewer bytes: dead intermediates' space was reused
    assert len(state.memory.allocations) < len(plain.memory.allocations)
    size = [sum(a.nbytes for a in s.memory.allocations.values()) for s in (state, plain)]
    assert size[0] < size[1]
    write_bundle(state, tmp_path / "bundle", path)
    res = simulate_bundle(tmp_path / "bundle", topo, tmp_path / "out",
                          SimOptions(verify=True, trace=False, report=False))
    assert res.verdict.ok, [c for c in res.verdict.checks if not c.ok]
