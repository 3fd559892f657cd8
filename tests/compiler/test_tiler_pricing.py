"""The GEMM tiler's estimate: the loading PEs' share of one memory, and where it applies
(`lower.gemm_parts.memory_sharing_pes`), and the engine's own timing model."""

from types import SimpleNamespace

import pytest

from kernbench.compiler.lower.gemm_parts import memory_sharing_pes
from kernbench.compiler.tiling import _Engine, _estimate
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.topology import load_topology

SYSTOLIC = _Engine(16, 16, "os")


@pytest.mark.parametrize(("preset", "expected"), [
    ("small", 4), ("n150", 64), ("p150", 130), ("t3k", 64),  # one cube a chip
    ("base", 0), ("large", 0), ("large-x8", 0),  # several cubes a chip: no share
])
def test_memory_sharing_pes_only_where_a_chip_has_one_memory(preset: str,
                                                              expected: int) -> None:
    topo = load_topology(preset)
    lw = SimpleNamespace(topo=topo, n_pes=len(topo.pes))
    assert memory_sharing_pes(lw) == expected


def _est(**kw: float) -> float:
    args = dict(tm=64, tn=64, tk=64, k_part=1024, tiles=4, steps=16, ks=1, a_bytes=2.0,
                w_bytes=2.0, bpc=1.0, dma_fixed=100.0, eng=SYSTOLIC, n_pes=64, engines=1)
    args.update(kw)
    return _estimate(**args)


def test_fewer_tiles_than_sharing_pes_load_at_their_share() -> None:
    # 4 tiles on a memory 64 PEs share at 1 B/cycle each: each loading PE gets 16 B a
    # cycle, capped at its own 8
    assert _est(peak_bpc=8.0, share=64) == _est(bpc=8.0)
    assert _est(peak_bpc=32.0, share=64) == _est(bpc=16.0)
    assert _est(peak_bpc=8.0, share=64) < _est()


def test_no_share_when_every_sharing_pe_loads_or_none_is_given() -> None:
    assert _est(peak_bpc=8.0, share=4) == _est()  # tiles == sharing PEs
    assert _est(peak_bpc=8.0, share=0) == _est()  # a chip of several cubes
    assert _est(peak_bpc=0.5, share=64) == _est()  # the PE's own ceiling is lower


def test_engine_prices_a_tile_by_its_timing_model() -> None:
    spec = load_topology("n150").config.cube.pe_template.pe_gemm
    eng = _Engine(spec.rows, spec.cols, spec.dataflow, spec.model_dump_json(), 16)
    assert eng.cycles(64, 128, 256) == gemm_cycles(spec, 64, 128, 256, 16)
