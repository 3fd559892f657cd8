"""ONNX models built with onnx.helper at benchmark time (random weights, fixed seed)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def single_gemm(m: int, n: int, k: int, seed: int = 0) -> onnx.ModelProto:
    """Y[m, n] = X[m, k] @ W[k, n] (one MatMul; quantized W8A8 by the default QConfig)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="gemm")], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def int8_gemm(m: int, n: int, k: int, seed: int = 0) -> onnx.ModelProto:
    """An int8 GEMM: int8 activations X_q (scale 1/64) and int8 weights (per-channel
    scales) through DequantizeLinear into MatMul: Y = (X_q·s_x) @ (W_q·s_w)."""
    rng = np.random.default_rng(seed)
    wq = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    sw = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "sx"], ["x"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "sw"], ["w"], name="dq_w", axis=1),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="gemm"),
    ]
    g = helper.make_graph(
        nodes, "int8_gemm",
        [helper.make_tensor_value_info("xq", TensorProto.INT8, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(sw, "sw"),
         numpy_helper.from_array(np.array(1 / 64, np.float32), "sx")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
