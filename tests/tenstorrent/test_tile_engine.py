"""The tile matrix engine (pe_gemm impl tile_fpu_v1): cycles in closed form, fidelity as an
engine parameter, and the dispatch of gemm_cycles by impl."""

from __future__ import annotations

import math

import pytest

from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.components.builtin.tile_engine import tile_engine_cycles
from kernbench.config.schema import PeGemmSpec
from kernbench.errors import InputError
from kernbench.topology import load_topology


@pytest.mark.parametrize("fidelity, cycles", [("LoFi", 16), ("HiFi2", 32), ("HiFi3", 48),
                                              ("HiFi4", 64)])
def test_a_32_cube_tile_costs_the_published_cycles(fidelity, cycles):
    assert tile_engine_cycles(32, 32, 32, 8, 16, 16, fidelity) == cycles


@pytest.mark.parametrize("m, n, k", [(1, 16, 16), (8, 16, 16), (9, 17, 33), (64, 96, 128)])
def test_partial_blocks_cost_whole_issues(m, n, k):
    expect = math.ceil(m / 8) * math.ceil(k / 16) * math.ceil(n / 16)
    assert tile_engine_cycles(m, n, k, 8, 16, 16, "LoFi") == expect
    assert tile_engine_cycles(m, n, k, 8, 16, 16, "HiFi3") == 3 * expect


def test_bad_extent_or_fidelity_is_refused():
    with pytest.raises(ValueError, match="m must be"):
        tile_engine_cycles(0, 32, 32, 8, 16, 16, "LoFi")
    with pytest.raises(ValueError, match="fidelity"):
        tile_engine_cycles(32, 32, 32, 8, 16, 16, "HiFi5")


def test_gemm_cycles_answers_with_the_configured_impl():
    spec = load_topology("n150").config.cube.pe_template.pe_gemm  # HiFi2
    assert gemm_cycles(spec, 64, 64, 64, 16) == 8 * 32
    systolic = PeGemmSpec(rows=32, cols=32, dataflow="os")
    # systolic: SCALE-Sim os fold = rows + cols + k - 2 cycles, minus one at the end
    assert gemm_cycles(systolic, 32, 32, 32, 8) == 32 + 32 + 32 - 2 - 1
    hifi2 = systolic.model_copy(update={"math_fidelity": "HiFi2"})
    assert gemm_cycles(hifi2, 32, 32, 32, 8) == 2 * (32 + 32 + 32 - 2 - 1)


def test_unknown_impl_names_the_field():
    spec = PeGemmSpec(impl="no_such_engine")
    with pytest.raises(InputError, match="no_such_engine"):
        gemm_cycles(spec, 8, 8, 8, 8)


def _gemm_ns(over: list[str]) -> tuple[float, float]:
    """(end - start of one 128 × 256 × 128 bf16 TE_GEMM_TILE on n150 PE 0, TCM port GB/s)."""
    from kernbench.cmdq.io import parse_program
    from kernbench.host.simulate import simulate_program

    topo = load_topology("n150", over)
    e = {"opcode": "TE_GEMM_TILE", "pe": 0, "id": 0, "m": 128, "k": 256, "n": 128,
         "ifm_bank": 0, "ifm_offset": 0, "wgt_bank": 1, "wgt_offset": 0, "ofm_bank": 2,
         "ofm_offset": 0, "qbits_weight": 16, "qbits_activation": 16, "ofm_qbits": 32,
         "f16_format": "bf16"}
    prog = parse_program({"cmdq": [e, {"opcode": "END", "id": 1}]})
    s = simulate_program(prog, topo, trace=False).stats()["entries"]["0"]
    return s["end_ns"] - s["start_ns"], topo.config.cube.pe_template.pe_tcm.bw_gbs


@pytest.mark.parametrize("port", [None, 16.0])
def test_streamed_operands_cross_the_port_beside_the_math(port):
    """n150 streams in chunks of 8 output tiles: 16 output tiles are 2 chunks, so the
    fetch before the math and the store after it are half the operands' and results'
    bytes, and the other halves cross the TCM port during the math (the GEMM stage
    takes the longer of the two). Closed form against the same GEMM unstreamed."""
    over = [f"cube.pe_template.pe_tcm.bw_gbs={port}"] if port else []
    on, bw = _gemm_ns(over)
    off, _ = _gemm_ns([*over, "cube.pe_template.pe_gemm.stream_dst_tiles=null"])
    rd, wr = (128 * 256 + 256 * 128) * 2, 128 * 128 * 4
    math_ns = 4 * 8 * 4 * 32  # tiles x HiFi2 cycles at 1 GHz
    fixed = off - (rd + wr) / bw - math_ns  # command and port latencies
    want = fixed + rd / 2 / bw + max(math_ns, (rd + wr) / 2 / bw) + wr / 2 / bw
    assert on == pytest.approx(want, abs=2.0)
    assert on < off
