"""Every kernel in benches/ verifies against numpy on `small` and `base`, with shapes that
are not multiples of the block sizes, and reports its time and roofline fraction."""

from __future__ import annotations

import importlib

import pytest

from kernbench.topology import load_topology

BENCHES = ["vector_add", "fused_softmax", "matmul", "layernorm", "flash_attention"]
TOPOS: dict[str, object] = {}


def topo(name: str):
    if name not in TOPOS:
        TOPOS[name] = load_topology(name)
    return TOPOS[name]


@pytest.mark.parametrize("preset", ["small", "base"])
@pytest.mark.parametrize("bench", BENCHES)
def test_bench_verifies(bench, preset):
    mod = importlib.import_module(f"benches.{bench}")
    r = mod.run(topo(preset))
    assert r["ok"], r
    # the fraction is the bound over the time, the bound the larger roof, and the run is
    # not faster than it
    assert r["bound_ns"] == max(r["compute_bound_ns"], r["memory_bound_ns"]) > 0
    assert r["roofline_fraction"] == pytest.approx(r["bound_ns"] / r["total_ns"], abs=1e-4)
    assert r["total_ns"] + 1e-2 >= r["bound_ns"]


def test_matmul_grid_spreads_over_pes():
    from benches import matmul

    one = matmul.run(topo("base"), pes=1)
    many = matmul.run(topo("base"))
    assert one["ok"] and many["ok"]
    assert many["pes"] == 12 and many["total_ns"] < one["total_ns"] / 4


def test_replicated_inputs_are_read_from_the_local_cube():
    from benches import matmul

    from kernbench.topology import load_topology

    # 64 programs over the 64 PEs of base: 48 of them sit on cubes 1-3
    topo = load_topology("base")
    kw = dict(M=256, N=256, K=64, block_m=32, block_n=32, block_k=32)
    far = matmul.run(topo, **kw)                    # A, B only in cube 0
    near = matmul.run(topo, replicate=True, **kw)   # a copy in every cube
    assert far["ok"] and near["ok"]
    assert near["total_ns"] < far["total_ns"]
