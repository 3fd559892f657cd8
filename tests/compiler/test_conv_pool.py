"""Conv, pooling and clamps run tiled on every PE (ADR-0703), through the whole stack:
ONNX → compile → simulate → data pass, checked exactly against the IR interpreter and
within the mode's tolerance against onnxruntime (the independent reference), with no
whole-layer op left. A tight TCM forces K steps (accumulating tiles) and row blocks
(halos)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main

rng = np.random.default_rng(7)
#: a 64 KiB TCM of 8 KiB banks: conv tiles need several K steps and row blocks
TIGHT = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
         "--set", "cube.pe_template.pe_tcm.reserved_kib=8"]


def _model(path: Path, x_shape: list[int], nodes: list, outputs: list[str],
           inits: list) -> Path:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     x_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    m = onnx.shape_inference.infer_shapes(m)  # fills in the outputs' shapes
    onnx.checker.check_model(m)
    onnx.save(m, path)
    np.savez(path.with_suffix(".inputs.npz"), x=rng.standard_normal(x_shape).astype(np.float32))
    return path


def _conv_model(tmp: Path, c: int, co: int, hw: list[int], k: int, group: int = 1,
                act: str | None = None, **attrs) -> Path:
    nsp = len(hw)
    w = (rng.standard_normal([co, c // group] + [k] * nsp) * 0.3).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"], group=group,
                              kernel_shape=[k] * nsp, **attrs)]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "relu6":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    return _model(tmp / "conv.onnx", [1, c, *hw], nodes, ["y"], inits)


def _run(tmp: Path, model: Path, qconfig: str | None, extra: list[str] = ()) -> tuple[dict, dict]:
    """Run with --verify; return (verification.json, opcode counts)."""
    out = tmp / "out"
    argv = ["run", str(model), "--out", str(out), "--verify", "--inputs",
            str(model.with_suffix(".inputs.npz")), "--keep-bundle", "--no-trace", "--no-report",
            *extra]
    if qconfig:
        q = tmp / "q.yaml"
        q.write_text(qconfig)
        argv += ["--qconfig", str(q)]
    assert main(argv) == 0
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    counts: dict[str, int] = {}
    for e in cmdq:
        counts[e["opcode"]] = counts.get(e["opcode"], 0) + 1
    return json.loads((out / "verification.json").read_text()), counts


def _check(v: dict, counts: dict, exact: bool) -> None:
    """No whole-layer op; the interpreter matched bit for bit (integer modes: int32
    accumulators and the same epilogue) or within fp32's allclose 1e-5 (the tiles sum K in
    another order than one BLAS call); onnxruntime within the mode's tolerance."""
    assert "VE_LAYER_OP" not in counts and "TE_LAYER_OP" not in counts, counts
    assert v["ok"], v
    interp = [c for c in v["checks"] if c["reference"] == "interpreter"]
    ort = [c for c in v["checks"] if c["reference"] == "onnxruntime"]
    assert interp and all(c["ok"] for c in interp), interp
    if exact:
        assert all(c["max_abs_err"] == 0.0 for c in interp), interp
    assert ort and all(c["ok"] for c in ort), ort


FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"
CASES = {  # name: (c_in, c_out, spatial, kernel, group, activation, ONNX attributes)
    "1x1": (8, 16, [6, 6], 1, 1, None, {}),
    "3x3_pad_relu": (8, 16, [6, 6], 3, 1, "relu", {"pads": [1, 1, 1, 1]}),
    "3x3_stride2_asym": (8, 12, [7, 6], 3, 1, None, {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    "3x3_dilation2": (6, 8, [9, 9], 3, 1, None, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "3x3_groups2": (8, 8, [6, 6], 3, 2, "relu", {"pads": [1, 1, 1, 1]}),
    "depthwise_mult2_relu6": (8, 16, [7, 7], 3, 8, "relu6",
                              {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "conv1d": (8, 16, [10], 3, 1, None, {"pads": [1, 1]}),
}


@pytest.mark.parametrize("mode", ["fp32", "int8"])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_grid_tiled_and_verified(tmp_path, case, mode):
    c, co, hw, k, group, act, attrs = CASES[case]
    model = _conv_model(tmp_path, c, co, hw, k, group, act, **attrs)
    v, counts = _run(tmp_path, model, FP32 if mode == "fp32" else None)
    _check(v, counts, exact=mode == "int8")
    assert v["mode"] == ("fp32" if mode == "fp32" else "quantized")
    engine = "VE_DWCONV_TILE" if group == c else "TE_CONV_TILE"
    assert counts.get(engine, 0) >= 1, counts
    if act:  # the clamp runs in the conv's epilogue
        assert counts["VE_CLIP_TILE"] == counts.get("DMA_STORE_TILE"), counts


@pytest.mark.parametrize("mode", ["fp32", "int8"])
def test_conv_in_a_tight_tcm_accumulates_over_k_and_row_blocks(tmp_path, mode):
    model = _conv_model(tmp_path, 32, 32, [16, 16], 3, 1, "relu", pads=[1, 1, 1, 1])
    v, counts = _run(tmp_path, model, FP32 if mode == "fp32" else None, TIGHT)
    _check(v, counts, exact=mode == "int8")
    stores = counts["DMA_STORE_TILE"]
    assert stores > 1 and counts["TE_CONV_TILE"] > stores, counts  # K steps per tile


def _pool_model(tmp: Path) -> Path:
    nodes = [
        helper.make_node("MaxPool", ["x"], ["max"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["avg_ceil"], kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["x"], ["avg_incl"], kernel_shape=[2, 3],
                         strides=[2, 1], pads=[0, 1, 1, 1], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["x"], ["gap"]),
        helper.make_node("GlobalMaxPool", ["x"], ["gmp"]),
        helper.make_node("ReduceMean", ["x"], ["rmean"], axes=[2, 3], keepdims=0),
    ]
    outs = ["max", "avg_ceil", "avg_incl", "gap", "gmp", "rmean"]
    return _model(tmp / "pool.onnx", [2, 12, 10, 9], nodes, outs, [])


@pytest.mark.parametrize("extra", [[], TIGHT], ids=["small", "tight_tcm"])
def test_pooling_tiled_and_verified(tmp_path, extra):
    v, counts = _run(tmp_path, _pool_model(tmp_path), FP32, extra)
    _check(v, counts, exact=True)  # the same window sums in the same order
    assert counts["VE_POOL_TILE"] >= 3 and counts["VE_REDUCE_TILE"] >= 3, counts


ZOO = Path(__file__).resolve().parents[1] / "zoo"


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", ["resnet", "mobilenet"])
def test_zoo_cnns_compile_without_whole_layer_ops(tmp_path, model, topology):
    out = tmp_path / "bundle"
    assert main(["compile", str(ZOO / f"{model}.onnx"), "--topology", topology, "--out",
                 str(out), "--quiet"]) == 0
    ops = {e["opcode"] for e in json.loads((out / "cmdq.json").read_text())["cmdq"]}
    assert not ops & {"VE_LAYER_OP", "TE_LAYER_OP"}, ops
    assert "VE_POOL_TILE" in ops and "VE_REDUCE_TILE" in ops
    assert ("VE_DWCONV_TILE" in ops) == (model == "mobilenet")
