"""Which IR nodes form one vector chain is the lowering plan's (`fused`: a node and the
layers its tiles compute); the tiles only choose which of their ops merge, and
`check_tiles` refuses a VE_FUSED_TILE chaining a layer the plan does not compute there."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from tiny_ir import compile_until, gemm_graph

from kernbench.compiler.checks import InvariantError, check_tiles


def test_a_fused_tile_chains_only_the_layers_the_plan_fuses_into_its_node():
    g, feeds = gemm_graph(m=1, k=32, n=24, gelu=True)
    st = compile_until(g, feeds, "tiling")
    plan = st.require_lowering_plan()
    chains = [op for op in st.require_tiles().ops if op.steps]
    # the GEMM's epilogue: its dequantize, then the GELU the plan fuses into it
    assert chains and {tuple(s.layer for s in op.steps) for op in chains} == {("fc", "act")}
    assert plan.fused == {"act": "fc"}
    check_tiles(st)
    st.lowering_plan = dataclasses.replace(plan, fused=MappingProxyType({}))
    with pytest.raises(InvariantError, match="chains a step of act, which the lowering plan "
                                             "does not compute in fc's tiles"):
        check_tiles(st)
