"""The plan pass decides on which PE each layer of one tile runs (`LoweringPlan.lone`): a
rotation per cube across layers, told from the same block functions the tiles cut with;
checked, dumped, carried out by the tiles, and refused when the tiles and the plan differ."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

from kernbench.compiler.checks import InvariantError, check_plan
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.verify import verify
from kernbench.topology import load_topology

#: tiny independent layers (one block each) and one big one (several blocks)
SMALL_OPS = ("abs", "neg", "exp", "sqrt", "sin", "cos")


def _graph() -> Graph:
    tensors = [TensorIR(id="x", shape=[4, 4], dtype="fp32", role="activation"),
               TensorIR(id="big", shape=[64, 256], dtype="fp32", role="activation"),
               TensorIR(id="big_y", shape=[64, 256], dtype="fp32"),
               TensorIR(id="ids", shape=[1], dtype="int64", role="activation"),
               TensorIR(id="table", shape=[8, 4], dtype="fp32", role="weight", const=True),
               TensorIR(id="rows", shape=[1, 4], dtype="fp32")]
    nodes = []
    for i, op in enumerate(SMALL_OPS):
        tensors.append(TensorIR(id=f"y{i}", shape=[4, 4], dtype="fp32"))
        nodes.append(LayerIR(id=f"ew{i}", op_type="ELEMENTWISE", inputs=["x"],
                             outputs=[f"y{i}"], attributes={"op": op}))
        if i == 2:
            nodes.append(LayerIR(id="wide", op_type="ELEMENTWISE", inputs=["big"],
                                 outputs=["big_y"], attributes={"op": "abs"}))
            nodes.append(LayerIR(id="emb", op_type="EMBEDDING", inputs=["ids", "table"],
                                 outputs=["rows"]))
    outs = [f"y{i}" for i in range(len(SMALL_OPS))] + ["big_y", "rows"]
    g = Graph(nodes=nodes, inputs=["x", "big", "ids"], outputs=outs,
              tensors={t.id: t for t in tensors}, metadata={"model_name": "lone"})
    g.weights["table"] = np.arange(32, dtype=np.float32).reshape(8, 4)
    g.rebuild_links()
    return verify(g) or g


def _until(last: str, topology: str = "small") -> CompileState:
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    st = CompileState(_graph(), load_topology(topology), CompileOptions())
    return PassManager(passes).run(st)


def _cube_pes(st: CompileState) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, pe in enumerate(st.topology.pes):
        out.setdefault(pe.cube.index, []).append(i)
    return out


@pytest.mark.parametrize("topology", ["small", "base"])
def test_layers_of_one_tile_take_the_next_pe_of_their_cubes_rotation(topology):
    st = _until("tiling", topology)
    lone = dict(st.require_lowering_plan().lone)
    layers = [f"ew{i}" for i in range(len(SMALL_OPS))]
    # every tiny layer and the one-block gather are planned; the big layer makes blocks
    assert set(lone) == set(layers) | {"emb"}
    memory, cubes = st.require_memory(), _cube_pes(st)
    seen: dict[int, int] = {}
    for n in st.graph.nodes:  # graph order: the i-th layer of one tile of a cube
        if n.id not in lone:
            continue
        p = memory.placements[n.outputs[0]]
        cube = p.addr // memory.cube_bytes if len(cubes) > 1 else 0
        i = seen.get(cube, 0)
        seen[cube] = i + 1
        assert lone[n.id] == cubes[cube][i % len(cubes[cube])], n.id
    ops = st.require_tiles().ops
    for layer, pe in lone.items():  # the tiles run where the plan says
        assert {op.pe for op in ops if op.layer == layer} == {pe}
    assert len({op.pe for op in ops if op.layer == "wide"}) > 1
    assert "  lone (layer of one tile -> its PE" in st.require_lowering_plan().dump()
    assert f"    ew0 -> pe{lone['ew0']}" in st.require_lowering_plan().dump()


def test_check_plan_refuses_a_pe_off_the_rotation_and_a_layer_that_is_not_small():
    st = _until("plan")
    plan = st.require_lowering_plan()
    lone = dict(plan.lone)
    lone["ew0"], lone["ew1"] = lone["ew1"], lone["ew0"]
    st.lowering_plan = dataclasses.replace(plan, lone=MappingProxyType(lone))
    with pytest.raises(InvariantError, match="not on PE .* the next of its cube's rotation"):
        check_plan(st)
    st.lowering_plan = dataclasses.replace(plan, lone=MappingProxyType({"x_node": 0}))
    with pytest.raises(InvariantError, match="no element-wise layer or gather"):
        check_plan(st)


def test_the_tiles_refuse_a_plan_that_disagrees():
    """A layer of one tile the plan gives no PE is refused while tiling; a layer the plan
    runs as one tile that the tiles cut in blocks is refused by `check_tiles`."""
    st = _until("plan")
    plan = st.require_lowering_plan()
    tiling = PASSES[PASS_NAMES.index("tiling"):PASS_NAMES.index("tiling") + 1]
    no_pe = {k: v for k, v in plan.lone.items() if k != "ew3"}
    st.lowering_plan = dataclasses.replace(plan, lone=MappingProxyType(no_pe))
    with pytest.raises(RuntimeError, match="ew3: its tiles make one tile .* no PE of one tile"):
        PassManager(tiling).run(dataclasses.replace(st, memory=st.require_memory().copy()))
    extra = dict(plan.lone, wide=0)
    st.lowering_plan = dataclasses.replace(plan, lone=MappingProxyType(extra))
    with pytest.raises(InvariantError, match="layer wide runs as one tile on PE None"):
        PassManager(tiling).run(st)
