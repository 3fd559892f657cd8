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
    assert r["total_ns"] > 0 and 0 < r["roofline_fraction"] <= 1.0


def test_matmul_grid_spreads_over_pes():
    from benches import matmul

    one = matmul.run(topo("base"), pes=1)
    many = matmul.run(topo("base"))
    assert one["ok"] and many["ok"]
    assert many["pes"] == 12 and many["total_ns"] < one["total_ns"] / 4
