"""The plan pass decides which ReLU / Clip a conv's epilogue applies (`LoweringPlan.clamps`):
checked, dumped, carried out by the conv's tiles, and refused when the conv is not tiled."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.compiler.checks import InvariantError, check_plan
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.topology import load_topology

FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"


def _conv_relu(tmp: Path, *, relu_output_too: bool = False, dims: int = 2) -> Path:
    """x → Conv → c → Relu → y (c also a graph output when `relu_output_too`)."""
    rng = np.random.default_rng(3)
    hw = [6] * dims
    w = (rng.standard_normal([8, 4] + [3] * dims) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3] * dims,
                              pads=[1] * (2 * dims)),
             helper.make_node("Relu", ["c"], ["y"])]
    outs = ["y"] + (["c"] if relu_output_too else [])
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, *hw])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in outs], [numpy_helper.from_array(w, "w")])
    m = onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))
    path = tmp / "conv.onnx"
    onnx.save(m, path)
    (tmp / "q.yaml").write_text(FP32)
    return path


def _until(tmp: Path, last: str, **kw) -> CompileState:
    g, _ = load_model(_conv_relu(tmp, **kw), tmp / "q.yaml")
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    return PassManager(passes).run(CompileState(g, load_topology("small"), CompileOptions()))


def _ids(st: CompileState) -> tuple[str, str]:
    (conv,) = [n.id for n in st.graph.nodes if n.op_type == "CONV"]
    (relu,) = [n.id for n in st.graph.nodes if n.op_type == "ELEMENTWISE"]
    return conv, relu


def test_the_plan_names_the_clamp_a_tiled_conv_applies(tmp_path):
    st = _until(tmp_path, "plan")
    conv, relu = _ids(st)
    plan = st.require_lowering_plan()
    assert dict(plan.clamps) == {conv: relu} and plan.fused[relu] == conv
    assert f"    {conv} -> {relu}\n" in plan.dump().split("clamps")[1]
    check_plan(st)


def test_the_conv_tiles_carry_the_planned_clamp_out(tmp_path):
    st = _until(tmp_path, "tiling")
    conv, relu = _ids(st)
    tg = st.require_tiles()
    clips = [op for op in tg.ops if op.opcode == "VE_CLIP_TILE"]
    assert clips and {op.layer for op in clips} == {conv}  # in the conv's epilogue
    assert tg.fused_into == {relu: conv} and relu not in tg.layer_tiles


def test_a_conv_output_read_elsewhere_keeps_its_clamp_separate(tmp_path):
    st = _until(tmp_path, "tiling", relu_output_too=True)
    conv, relu = _ids(st)
    assert dict(st.require_lowering_plan().clamps) == {}
    assert {op.layer for op in st.require_tiles().ops if op.opcode == "VE_CLIP_TILE"} == {relu}


def test_a_conv_that_runs_whole_gets_no_clamp_and_a_planned_one_is_refused(tmp_path):
    """A 3-D conv is not tiled: the plan leaves its ReLU to be tiled on its own; a plan that
    gives its epilogue the ReLU anyway is refused by the tiling pass, not half done."""
    st = _until(tmp_path, "plan", dims=3)
    conv, relu = _ids(st)
    plan = st.require_lowering_plan()
    assert dict(plan.clamps) == {} and relu not in plan.fused
    st.lowering_plan = dataclasses.replace(plan, clamps=MappingProxyType({conv: relu}))
    tiling = [p for p in PASSES if p.name == "tiling"]
    with pytest.raises(RuntimeError, match="fused consumer or clamp.*not tiled"):
        PassManager(tiling).run(st)


def test_check_plan_refuses_a_clamp_that_is_not_the_convs(tmp_path):
    st = _until(tmp_path, "plan")
    conv, relu = _ids(st)
    plan = st.require_lowering_plan()
    st.lowering_plan = dataclasses.replace(plan, clamps=MappingProxyType({relu: conv}))
    with pytest.raises(InvariantError, match="not a ReLU / Clip of that conv's output"):
        check_plan(st)
    st.lowering_plan = dataclasses.replace(plan, fused=MappingProxyType({}))
    with pytest.raises(InvariantError, match="fused into it"):
        check_plan(st)
