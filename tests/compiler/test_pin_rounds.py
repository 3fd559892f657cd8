"""The plan pass pins the spread storage the layers it runs whole touch (ADR-1205): per
lowering family, a small graph whose layer runs whole (or cannot tile) on a storage the
memory plan spreads over the cubes of `base`. The plan names the layers run whole and the
pins; the tiles run exactly those layers whole (`checks.check_tiles`); the outputs are
the reference interpreter's, bit for bit (`--verify`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main
from kernbench.compiler.checks import InvariantError, check_plan, check_tiles
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.verify import verify
from kernbench.topology import load_topology

FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"


def _save(tmp: Path, nodes: list, x_shape: list[int], y: onnx.ValueInfoProto,
          inits: list, extra_inputs: tuple = ()) -> Path:
    """x → Neg → h (an intermediate large enough to spread over the cubes) → `nodes`."""
    g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["h"]), *nodes], "pin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape), *extra_inputs],
        [y], inits)
    path = tmp / "pin.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), path)
    (tmp / "q.yaml").write_text(FP32)
    return path


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _gather(tmp: Path) -> Path:
    idx = numpy_helper.from_array(np.array([3, 1, 2, 0], np.int64), "idx")
    return _save(tmp, [helper.make_node("Gather", ["h", "idx"], ["y"], axis=1)], [256, 64],
                 _f32("y", [256, 4]), [idx])


def _reduce_leading(tmp: Path) -> Path:
    return _save(tmp, [helper.make_node("ReduceMean", ["h"], ["y"], axes=[0], keepdims=1)],
                 [256, 64], _f32("y", [1, 64]), [])


def _slice_innermost_step(tmp: Path) -> Path:
    ts = [numpy_helper.from_array(np.array([v], np.int64), n)
          for v, n in ((0, "st"), (64, "en"), (1, "ax"), (2, "sp"))]
    return _save(tmp, [helper.make_node("Slice", ["h", "st", "en", "ax", "sp"], ["y"])],
                 [256, 64], _f32("y", [256, 32]), ts)


def _matmul_vector(tmp: Path) -> Path:
    return _save(tmp, [helper.make_node("MatMul", ["h", "v"], ["y"])], [256, 64],
                 _f32("y", [256]), [], (_f32("v", [64]),))


def _pool_3d(tmp: Path) -> Path:
    return _save(tmp, [helper.make_node("MaxPool", ["h"], ["y"], kernel_shape=[2, 2, 2],
                                        strides=[2, 2, 2])],
                 [1, 8, 8, 16, 16], _f32("y", [1, 8, 4, 8, 8]), [])


def _qdq_per_channel(tmp: Path) -> Path:
    sc = numpy_helper.from_array(np.linspace(0.01, 0.05, 64).astype(np.float32), "sc")
    zp = numpy_helper.from_array(np.zeros(64, np.int8), "zp")
    return _save(tmp, [helper.make_node("QuantizeLinear", ["h", "sc", "zp"], ["q"], axis=1),
                       helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["y"], axis=1)],
                 [256, 64], _f32("y", [256, 64]), [sc, zp])


def _quantize_per_channel(tmp: Path) -> Path:
    sc = numpy_helper.from_array(np.linspace(0.01, 0.05, 64).astype(np.float32), "sc")
    zp = numpy_helper.from_array(np.zeros(64, np.int8), "zp")
    return _save(tmp, [helper.make_node("QuantizeLinear", ["h", "sc", "zp"], ["y"], axis=1)],
                 [256, 64], helper.make_tensor_value_info("y", TensorProto.INT8, [256, 64]),
                 [sc, zp])


def _quantized(tmp: Path, nodes: list, x_shape: list[int], y_shape: list[int],
               inits: list) -> Path:
    """x → QuantizeLinear (per tensor: tiled) → hq int8 (spread) → `nodes` → y int8."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.array(0, np.int8), "xz"),
             numpy_helper.from_array(np.array(0.5, np.float32), "ys"),
             numpy_helper.from_array(np.array(3, np.int8), "yz"), *inits]
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["hq"]), *nodes], "pin",
        [_f32("x", x_shape)], [helper.make_tensor_value_info("y", TensorProto.INT8, y_shape)],
        inits)
    path = tmp / "pin.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), path)
    (tmp / "q.yaml").write_text(FP32)
    return path


def _int8(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.int8), name)


def _qlinear_matmul(tmp: Path) -> Path:
    """B's zero point leaves its re-centered values outside int8: runs whole."""
    b = np.random.default_rng(0).integers(-128, 128, (256, 16))
    inits = [_int8("b", b), numpy_helper.from_array(np.array(0.02, np.float32), "bs"),
             _int8("bz", -100)]
    return _quantized(tmp, [helper.make_node(
        "QLinearMatMul", ["hq", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"])],
        [256, 256], [256, 16], inits)


def _qlinear_conv(tmp: Path) -> Path:
    """The weight's zero point leaves its re-centered values outside int8: runs whole."""
    w = np.random.default_rng(0).integers(-128, 128, (8, 16, 3, 3))
    inits = [_int8("w", w), numpy_helper.from_array(np.array(0.02, np.float32), "ws"),
             _int8("wz", -100)]
    return _quantized(tmp, [helper.make_node(
        "QLinearConv", ["hq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
        kernel_shape=[3, 3])], [1, 16, 64, 64], [1, 8, 62, 62], inits)


def _ir(tmp: Path, x_shape: list[int], node: LayerIR, tensors: list[TensorIR],
        inputs: list[str], weights: dict[str, np.ndarray]) -> Path:
    """An IR graph: x → Neg → h (spread) → `node` → y; saved as ir.json + weights.npz."""
    ts = [TensorIR(id="x", shape=x_shape, dtype="fp32", role="activation"),
          TensorIR(id="h", shape=x_shape, dtype="fp32"), *tensors]
    g = Graph(nodes=[LayerIR(id="neg", op_type="ELEMENTWISE", inputs=["x"], outputs=["h"],
                             attributes={"op": "neg"}), node],
              inputs=["x", *inputs], outputs=list(node.outputs),
              tensors={t.id: t for t in ts}, metadata={"model_name": "pin"})
    g.weights.update(weights)
    g.rebuild_links()
    verify(g)
    (tmp / "q.yaml").write_text(FP32)
    g.save(tmp / "ir.json")
    return tmp / "ir.json"


def _attention_broadcast_mask(tmp: Path) -> Path:
    """A float attention whose mask is one row for every query: the float tiles read whole
    (S, T) mask rows, so it runs whole."""
    s4 = [1, 4, 64, 64]
    ts = [TensorIR(id=t, shape=s4, dtype="fp32", role="activation") for t in ("k", "v")]
    ts += [TensorIR(id="mask", shape=[1, 1, 1, 64], dtype="fp32", role="activation"),
           TensorIR(id="y", shape=s4, dtype="fp32")]
    att = LayerIR(id="attention", op_type="ATTENTION", inputs=["h", "k", "v", "mask"],
                  outputs=["y"], attributes={"num_heads": 4, "num_kv_heads": 4,
                                             "head_dim": 64, "scale": 0.125,
                                             "mask": "additive"})
    return _ir(tmp, s4, att, ts, ["k", "v", "mask"], {})


def _kv_update_last_axis(tmp: Path) -> Path:
    """A cache appended along its last axis: the tiles copy along the sequence only."""
    ts = [TensorIR(id="new", shape=[1, 4, 64, 8], dtype="fp32", role="activation"),
          TensorIR(id="y", shape=[1, 4, 64, 72], dtype="fp32")]
    kv = LayerIR(id="kv_update", op_type="KV_UPDATE", inputs=["h", "new"], outputs=["y"],
                 attributes={"axis": 3})
    return _ir(tmp, [1, 4, 64, 64], kv, ts, ["new"], {})


def _rope_interleaved(tmp: Path) -> Path:
    """An interleaved (GPT-J) rotation: VE_ROPE_TILE rotates halves, so it runs whole."""
    rng = np.random.default_rng(0)
    tables = {t: rng.standard_normal((1, 1, 64, 64)).astype(np.float32) for t in ("cos", "sin")}
    ts = [TensorIR(id=t, shape=[1, 1, 64, 64], dtype="fp32", role="weight", const=True)
          for t in tables]
    ts.append(TensorIR(id="y", shape=[1, 4, 64, 64], dtype="fp32"))
    rope = LayerIR(id="rope", op_type="ROPE", inputs=["h", "cos", "sin"], outputs=["y"],
                   attributes={"interleaved": True})
    return _ir(tmp, [1, 4, 64, 64], rope, ts, [], tables)


#: case → (graph builder, the op type of the layer that needs the pin, does it run whole
#: once its input is pinned); the storage spread is h, hq in the QOperator graphs, and
#: the present cache of the KV_UPDATE (the memory plan spreads a present cache)
CASES: dict[str, tuple[Callable[[Path], Path], str, bool]] = {
    "attention": (_attention_broadcast_mask, "ATTENTION", True),
    "kv_update": (_kv_update_last_axis, "KV_UPDATE", True),
    "rope": (_rope_interleaved, "ROPE", True),
    "qlinear_matmul": (_qlinear_matmul, "QLINEAR_MATMUL", True),
    "qlinear_conv": (_qlinear_conv, "QLINEAR_CONV", True),
    "gather": (_gather, "GATHER", False),
    "reduce": (_reduce_leading, "REDUCE", True),
    "copy": (_slice_innermost_step, "SLICE", True),
    "matmul": (_matmul_vector, "MATMUL", True),
    "pool": (_pool_3d, "POOL", True),
    "qdq": (_qdq_per_channel, "QDQ", True),
    "quantize": (_quantize_per_channel, "QUANTIZE", True),
}


def _compile(path: Path, last: str = PASS_NAMES[-1]) -> CompileState:
    g, _ = load_model(path, path.parent / "q.yaml")
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    return PassManager(passes).run(CompileState(g, load_topology("base"), CompileOptions()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_pins_what_a_layer_run_whole_touches(tmp_path, case):
    build, op, stays_whole = CASES[case]
    path = build(tmp_path)
    spread = "hq" if case.startswith("qlinear") else "y" if case == "kv_update" else "h"
    before = _compile(path, PASS_NAMES[PASS_NAMES.index("plan") - 1])
    assert before.require_memory().placements[spread].parts  # spread over the cubes
    st = _compile(path)
    plan, memory = st.require_lowering_plan(), st.require_memory()
    h = memory.placements[spread]
    (layer,) = [n.id for n in st.graph.nodes if n.op_type == op]
    assert not h.parts and h.key in plan.pins and st.pinned == set(plan.pins)
    assert set(plan.pins.values()) == {layer}
    assert not any(memory.placements[t].parts for t in memory.placements
                   if memory.placements[t].key in plan.pins)
    assert plan.whole == ({layer} if stays_whole else frozenset())
    tiles = st.require_tiles()
    assert tiles.whole == set(plan.whole)  # what the tiles ran whole is what the plan said
    whole_ops = {o.layer for o in tiles.ops if o.opcode.endswith("LAYER_OP")}
    assert whole_ops == set(plan.whole)


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_of_a_pinned_graph_are_the_interpreters(tmp_path, case, capsys):
    path = CASES[case][0](tmp_path)
    out = tmp_path / "out"
    code = main(["run", str(path), "-t", "base", "--qconfig", str(tmp_path / "q.yaml"),
                 "--out", str(out), "--verify", "--no-report", "--no-trace"])
    err = capsys.readouterr().err
    assert code == 0, err[-1500:]
    verdict = json.loads((out / "verification.json").read_text())
    interp = [c for c in verdict["checks"] if c["reference"] == "interpreter"]
    assert interp and all(c["ok"] for c in interp), interp


def test_the_plan_predicts_every_lowering_the_tiling_pass_dispatches_to():
    from kernbench.compiler.lower.tile_pass import LOWERINGS
    from kernbench.compiler.lower.whole_plan import TILED

    assert set(TILED) == set(LOWERINGS)


def test_checks_refuse_a_plan_the_tiles_or_the_pins_disagree_with(tmp_path):
    st = _compile(_reduce_leading(tmp_path))
    plan = st.require_lowering_plan()
    (layer,) = plan.whole
    st.lowering_plan = dataclasses.replace(plan, whole=frozenset())
    with pytest.raises(InvariantError, match=f"{layer} runs whole, yet the lowering plan"):
        check_tiles(st)
    # a pin for no layer of the graph
    st.lowering_plan = dataclasses.replace(plan, pins=MappingProxyType(
        dict.fromkeys(plan.pins, "nowhere")))
    with pytest.raises(InvariantError, match="which is no layer touching it"):
        check_plan(st)
    # a storage pinned that the plan's pins do not name
    st.lowering_plan = dataclasses.replace(plan, pins=MappingProxyType({}))
    with pytest.raises(InvariantError, match="do not name it"):
        check_plan(st)
    # a layer run whole on spread storage (the fixed point not reached)
    st.lowering_plan = plan
    memory = st.require_memory()
    h = memory.placements["h"]
    memory.placements["h"] = dataclasses.replace(h, parts=((h.addr, h.addr + 1, 0),))
    with pytest.raises(InvariantError, match="which is spread over the cubes"):
        check_plan(st)


def test_dump_after_plan_names_the_layers_run_whole_and_the_pins(tmp_path):
    g, _ = load_model(_reduce_leading(tmp_path), tmp_path / "q.yaml")
    passes = PASSES[:PASS_NAMES.index("plan") + 1]
    PassManager(passes, dump_after=("plan",), dump_dir=tmp_path / "d").run(
        CompileState(g, load_topology("base"), CompileOptions()))
    text = (tmp_path / "d" / "after-plan.txt").read_text()
    (layer,) = [n.id for n in g.nodes if n.op_type == "REDUCE"]
    whole = text.split("  whole (layers run as one whole-layer op):\n")[1].split("\n  ")[0]
    pins = text.split("(storage pinned to one cube -> the layer run whole that needed it):\n"
                      )[1].split("\n  ")[0]
    assert whole.split() == [layer] and pins.split() == ["h", "->", layer]
