"""Pinning (ADR-1175): a spread storage a whole-layer op touches is pinned whole to one
cube, the memory planned again, and the graph lowered again; a layer the spread input
kept from tiling then tiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.topology import load_topology


def _neg_then_gather(tmp: Path) -> Path:
    """x [256, 64] → Neg → h → Gather(axis 1, constant [3, 1, 2, 0]) → y [256, 4]: h is
    large enough to spread over the cubes of `base`; the gather's blocks read one-element
    runs of each row, which a spread input cannot serve."""
    idx = numpy_helper.from_array(np.array([3, 1, 2, 0], np.int64), "idx")
    g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["h"]),
         helper.make_node("Gather", ["h", "idx"], ["y"], axis=1)], "pin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 4])], [idx])
    path = tmp / "pin.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), path)
    (tmp / "q.yaml").write_text("default: {weight: fp32, activation: fp32, kv: fp32}\n")
    return path


def _until(tmp: Path, last: str) -> CompileState:
    g, _ = load_model(_neg_then_gather(tmp), tmp / "q.yaml")
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    return PassManager(passes).run(CompileState(g, load_topology("base"), CompileOptions()))


def test_a_spread_input_a_layer_cannot_tile_is_pinned_and_the_layer_then_tiles(tmp_path):
    before = _until(tmp_path, PASS_NAMES[PASS_NAMES.index("plan") - 1])
    assert len(before.require_memory().placements["h"].parts) == 4  # spread over the cubes
    planned = _until(tmp_path, "plan")  # the plan pass pins h and plans the memory again
    h = planned.require_memory().placements["h"]
    assert planned.pinned == {h.key} and not h.parts
    assert h.addr // planned.require_memory().cube_bytes == 0  # whole in cube 0
    plan = planned.require_lowering_plan()
    assert dict(plan.pins) == {h.key: "gather_1"} and not plan.whole  # then it tiles
    st = _until(tmp_path, "tiling")
    ops = st.require_tiles().ops
    gather = [op for op in ops if op.layer == "gather_1"]
    assert gather and not any(op.opcode.endswith("LAYER_OP") for op in ops)
    assert not st.require_tiles().whole


def test_a_pinned_storage_keeps_its_name_when_intermediates_reuse_space(tmp_path):
    """With HBM reuse (a shape-only model's default), a tensor that was spread took no
    other's space; once pinned it must not either, or its storage is renamed and the
    plan's pins name a storage its layer no longer touches (a real-size MoE prefill
    failed the plan's check so). The MoE layers of a prefill run whole on spread rows."""
    from kernbench.compiler.pipeline import compile_graph
    from kernbench.host.models import ShapeOptions, resolve_model

    repo = Path(__file__).resolve().parents[2]
    res = resolve_model(repo / "tests" / "hf_configs" / "tiny-mixtral.json",
                        ShapeOptions(1, 256, 0), tmp_path, None)
    g, _ = load_model(res.path, None)
    state, _ = compile_graph(g, load_topology("large"), CompileOptions(reuse_hbm=True))
    pins = state.lowering_plan.pins
    assert pins and set(pins) == state.pinned
    memory = state.memory
    nodes = {n.id: n for n in state.graph.nodes}
    for key, layer in pins.items():  # each pin is touched by the layer it names
        keys = {memory.placements[t].key for t in (*nodes[layer].inputs, *nodes[layer].outputs)
                if t and t in memory.placements}
        assert key in keys
