"""Exact .5 ties round half to even in quantize and requantize, as ONNX and onnxruntime
round: checked against onnxruntime's QuantizeLinear and QLinearMatMul on values that are
ties by construction, and against the data pass's quantize / requantize ops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.numerics import quant as qmath
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu

#: accumulators whose products with 0.5 and 0.25 are exact halves (and some that are not)
ACC = np.array([1, 3, 5, 7, -1, -3, -5, -7, 2, 6, -2, -6, 10, 0, 254, -254, 255, -257],
               np.int32)


def _ort(graph: onnx.GraphProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)],
                              ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _ort_quantize(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT8, list(x.shape))],
        initializer=[numpy_helper.from_array(np.float32(scale), "s"),
                     numpy_helper.from_array(np.int8(zp), "z")])
    return _ort(g, {"x": x})


def _ort_requantize(acc: np.ndarray, multiplier: float, zp: int) -> np.ndarray:
    """acc (int8 values) · [[1]] through QLinearMatMul with a_scale · b_scale / y_scale =
    multiplier: onnxruntime's own requantization of an integer accumulator."""
    a = acc.astype(np.int8).reshape(-1, 1)
    g = helper.make_graph(
        [helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                          ["y"])], "qmm",
        [helper.make_tensor_value_info("a", TensorProto.INT8, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT8, list(a.shape))],
        initializer=[numpy_helper.from_array(np.ones((1, 1), np.int8), "b"),
                     numpy_helper.from_array(np.float32(1.0), "sa"),
                     numpy_helper.from_array(np.int8(0), "za"),
                     numpy_helper.from_array(np.float32(1.0), "sb"),
                     numpy_helper.from_array(np.int8(0), "zb"),
                     numpy_helper.from_array(np.float32(1.0 / multiplier), "sy"),
                     numpy_helper.from_array(np.int8(zp), "zy")])
    return _ort(g, {"a": a}).reshape(-1)


def test_quantize_ties_match_onnxruntime():
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 126.5, -127.5, 0.25, 7.0], np.float32)
    for scale, zp in ((1.0, 0), (1.0, 3), (0.5, -2), (2.0, 1)):
        xs = (x * np.float32(scale)).astype(np.float32)  # x / scale are the ties above
        want = _ort_quantize(xs, scale, zp)
        np.testing.assert_array_equal(qmath.quantize(xs, np.float32(scale), zp, 8), want)


def test_requantize_ties_match_onnxruntime():
    acc = ACC[np.abs(ACC) <= 127]  # int8 operands for QLinearMatMul
    for mult, zp in ((0.5, 0), (0.5, 5), (0.25, -3)):
        want = _ort_requantize(acc, mult, zp)
        np.testing.assert_array_equal(qmath.requantize(acc, np.float32(mult), zp, 8), want)


def test_requantize_ties_by_hand():
    """acc · 0.5 rounded half to even (float64, by definition), + zero point, saturated."""
    half = ACC.astype(np.float64) * 0.5
    floor = np.floor(half)
    frac = half - floor
    even = np.where(frac == 0.5, np.where(floor % 2 == 0, floor, floor + 1),
                    np.round(half))
    want = np.clip(even + 4, -128, 127)
    np.testing.assert_array_equal(qmath.requantize(ACC, np.float32(0.5), 4, 8), want)


def test_data_pass_quantize_and_requantize_round_ties_to_even():
    """The data pass's VE quantize / requantize ops on the same ties."""
    t = "tcm:pe0"

    def run(op, x, dtype, **attrs):
        st = MemoryStore({t: 1 << 16})
        st.write(t, 0, x)
        p = {"op": op, "space": t, "input_addrs": [0], "input_shapes": [x.shape],
             "input_dtypes": [x.dtype.name], "dst_addr": 4096, "shape_out": x.shape,
             "dtype": dtype, **attrs}
        DataExecutor([OpRecord(0, 1, "pe0.pe_math", "math", op, p, [])], st).run()
        return st.read(t, 4096, x.shape, dtype)

    acc = ACC[np.abs(ACC) <= 127]
    np.testing.assert_array_equal(run("requantize", acc, "int8", multiplier=0.5),
                                  _ort_requantize(acc, 0.5, 0))
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.5], np.float32)
    np.testing.assert_array_equal(run("quantize", x, "int8", scale=1.0, zero_point=0, bits=8),
                                  _ort_quantize(x, 1.0, 0))
