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


def gpt_stack(n_layer: int = 2, d: int = 256, heads: int = 4, seq: int = 128,
              seed: int = 0) -> onnx.ModelProto:
    """A GPT-style decoder stack written by hand with onnx.helper, attention left unfused:
    per layer LayerNorm → MatMul Q, K, V → Reshape/Transpose to heads → MatMul(Q, Kᵀ) →
    Mul (1/√hd) → Softmax → MatMul(·, V) → Transpose/Reshape back → MatMul + residual Add →
    LayerNorm → MatMul (4d) → Gelu → MatMul + residual Add. No mask (bidirectional), so
    the importer sees the plain MatMul/Softmax/Transpose pattern. Input x [1, seq, d]."""
    rng = np.random.default_rng(seed)
    hd = d // heads
    inits: list = []
    nodes: list = []

    def w(name: str, shape: tuple[int, ...], std: float = 0.02) -> str:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def c(name: str, values: list[int] | float) -> str:
        arr = np.array(values, np.int64 if isinstance(values, list) else np.float32)
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(kind: str, ins: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
        return out

    heads_shape = c("heads_shape", [1, seq, heads, hd])
    flat_shape = c("flat_shape", [1, seq, d])
    scale = c("scale", 1.0 / float(np.sqrt(hd)))
    h = "x"
    for i in range(n_layer):
        p = f"l{i}."
        ones = numpy_helper.from_array(np.ones(d, np.float32), p + "g1")
        zeros = numpy_helper.from_array(np.zeros(d, np.float32), p + "b1")
        inits += [ones, zeros]
        x = op("LayerNormalization", [h, p + "g1", p + "b1"], p + "ln1", axis=-1)
        q, k, v = (op("MatMul", [x, w(p + f"w{n}", (d, d))], p + n) for n in "qkv")
        qh = op("Transpose", [op("Reshape", [q, heads_shape], p + "q4")], p + "qh",
                perm=[0, 2, 1, 3])
        kt = op("Transpose", [op("Reshape", [k, heads_shape], p + "k4")], p + "kt",
                perm=[0, 2, 3, 1])
        vh = op("Transpose", [op("Reshape", [v, heads_shape], p + "v4")], p + "vh",
                perm=[0, 2, 1, 3])
        s = op("Mul", [op("MatMul", [qh, kt], p + "qk"), scale], p + "scores")
        a = op("MatMul", [op("Softmax", [s], p + "probs", axis=-1), vh], p + "ctx")
        a = op("Reshape", [op("Transpose", [a], p + "ctx_t", perm=[0, 2, 1, 3]), flat_shape],
               p + "ctx_flat")
        h = op("Add", [h, op("MatMul", [a, w(p + "wo", (d, d))], p + "attn_out")], p + "res1")
        inits += [numpy_helper.from_array(np.ones(d, np.float32), p + "g2"),
                  numpy_helper.from_array(np.zeros(d, np.float32), p + "b2")]
        x = op("LayerNormalization", [h, p + "g2", p + "b2"], p + "ln2", axis=-1)
        f = op("Gelu", [op("MatMul", [x, w(p + "w1", (d, 4 * d))], p + "fc")], p + "gelu")
        h = op("Add", [h, op("MatMul", [f, w(p + "w2", (4 * d, d))], p + "mlp_out")],
               p + "res2")
    nodes.append(helper.make_node("Identity", [h], ["y"], name="out"))
    g = helper.make_graph(nodes, "gpt_stack",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
