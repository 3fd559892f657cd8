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
