"""Each math op of the data pass vs numpy / the numerics kernels the interpreter uses.

Equality with the numerics kernel is the bit-exactness the data pass owes the IR
interpreter; it is not a check that the answer is right (a wrong kernel is wrong in both).
So every kernel-backed op is also compared with an independent float64 reference written
here from the op's definition (softmax, LayerNorm, RMSNorm, GELU, RoPE, quantize,
requantize)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from kernbench.numerics import activations, norms
from kernbench.numerics import quant as qmath
from kernbench.numerics.softmax import softmax
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

T = "tcm:pe0"
rng = np.random.default_rng(7)
X = rng.standard_normal((4, 6)).astype(np.float32)
Y = rng.standard_normal((4, 6)).astype(np.float32) + 3.0
P = np.abs(X) + 0.5


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _quantize64(x: np.ndarray, scale: float, zp: int, bits: int) -> np.ndarray:
    """round(x / scale) half to even, + zero point, saturated to signed `bits`."""
    return np.clip(np.round(x.astype(np.float64) / scale) + zp, -2 ** (bits - 1),
                   2 ** (bits - 1) - 1)


def run(op, ins, shape_out, dtype="float32", **attrs):
    st = MemoryStore({T: 1 << 16})
    addrs, shapes, dts, imm = [], [], [], []
    for i, x in enumerate(ins):
        if np.ndim(x) == 0 and not isinstance(x, np.ndarray):
            addrs.append(None)
            shapes.append(())
            dts.append(None)
            imm.append(x)
            continue
        x = np.asarray(x)
        st.write(T, 1024 * i, x)
        addrs.append(1024 * i)
        shapes.append(x.shape)
        dts.append(x.dtype.name)
        imm.append(None)
    p = {"op": op, "space": T, "input_addrs": addrs, "input_shapes": shapes,
         "input_dtypes": dts, "imm": imm, "dst_addr": 32768, "shape_out": shape_out,
         "dtype": dtype, **attrs}
    DataExecutor([OpRecord(0, 1, "pe0.pe_math", "math", op, p, [])], st).run()
    return st.read(T, 32768, shape_out, dtype)


@pytest.mark.parametrize("op,fn", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum),
])
def test_binary(op, fn):
    assert np.array_equal(run(op, [X, Y], X.shape), fn(X, Y))


def test_broadcast_and_immediate():
    col = Y[:, :1]
    assert np.array_equal(run("sub", [X, col], X.shape), X - col)
    assert np.array_equal(run("mul", [X, 2.0], X.shape), X * np.float32(2))


@pytest.mark.parametrize("op,fn", [
    ("exp", np.exp), ("exp2", np.exp2), ("log", np.log), ("log2", np.log2), ("sqrt", np.sqrt),
    ("rsqrt", lambda x: 1 / np.sqrt(x)), ("tanh", np.tanh), ("neg", np.negative),
    ("abs", np.abs), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("erf", np.vectorize(math.erf)),
])
def test_unary(op, fn):
    assert np.array_equal(run(op, [P], P.shape), fn(P).astype(np.float32))


def test_where_and_cast():
    c = X > 0
    assert np.array_equal(run("where", [c, X, Y], X.shape), np.where(c, X, Y))
    assert np.array_equal(run("cast", [X * 10], X.shape, "int32"), np.trunc(X * 10).astype(np.int32))
    h = run("cast", [X], X.shape, "bfloat16")
    assert h.dtype == ml_dtypes.bfloat16 and np.array_equal(h, X.astype(ml_dtypes.bfloat16))
    assert np.array_equal(run("copy", [X], X.shape), X)


def test_transpose_and_reductions():
    assert np.array_equal(run("transpose", [X], (6, 4)), X.T)
    assert np.array_equal(run("sum", [X], (4,), axis=1), X.sum(1))
    assert np.array_equal(run("reduce_max", [X], (6,), axis=0), X.max(0))
    assert np.array_equal(run("max", [X], (4,), axis=1), X.max(1))
    assert np.array_equal(run("min", [X], (4, 1), axis=1, keepdims=True), X.min(1, keepdims=True))


def test_f16_computes_in_f32_and_rounds():
    h = X.astype(np.float16)
    assert np.array_equal(run("exp", [h], X.shape, "float16"),
                          np.exp(h.astype(np.float32)).astype(np.float16))


def test_softmax_matches_interpreter_with_causal_mask():
    assert np.array_equal(run("softmax", [X], X.shape), softmax(X, -1))
    np.testing.assert_allclose(run("softmax", [X], X.shape), _softmax64(X), rtol=1e-6,
                               atol=1e-7)
    got = run("softmax", [X], X.shape, scale=0.5, causal_offset=-1)
    allowed = np.arange(6)[None, :] <= np.arange(4)[:, None] - 1
    with np.errstate(all="ignore"):
        ref = softmax(X * np.float32(0.5) + np.where(allowed, 0, -np.inf).astype(np.float32),
                        -1)
    ref[0] = 0  # row 0 is fully masked
    assert np.array_equal(got, np.nan_to_num(ref))
    for i in range(1, 4):  # row i sees columns 0 .. i-1, scaled by 0.5
        want = np.zeros(6)
        want[:i] = _softmax64(X[i, :i] * 0.5)
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-7)


def test_norms_gelu_silu_rope():
    g = rng.standard_normal(6).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    ln = run("layernorm", [X, g, b], X.shape, eps=1e-5)
    assert np.array_equal(ln, norms.layernorm(X, g, b, axis=1, eps=1e-5)[0])
    x64 = X.astype(np.float64)
    d = x64 - x64.mean(1, keepdims=True)
    np.testing.assert_allclose(ln, d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * g + b,
                               rtol=1e-5, atol=1e-6)
    rms = run("rmsnorm", [X, g], X.shape, eps=1e-6)
    assert np.array_equal(rms, norms.rmsnorm(X, g, axis=1, eps=1e-6))
    np.testing.assert_allclose(rms, x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6)
                               * g, rtol=1e-5, atol=1e-6)
    gelu = run("gelu", [X], X.shape)
    assert np.array_equal(gelu, activations.gelu(X))
    erf64 = np.vectorize(math.erf)
    np.testing.assert_allclose(gelu, 0.5 * x64 * (1 + erf64(x64 / math.sqrt(2))), rtol=1e-5,
                               atol=1e-6)
    tanh_gelu = run("gelu", [X], X.shape, approximate="tanh")
    assert np.array_equal(tanh_gelu, activations.gelu(X, "tanh"))
    np.testing.assert_allclose(tanh_gelu, 0.5 * x64 * (1 + np.tanh(
        math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3))), rtol=1e-5, atol=1e-6)
    assert np.array_equal(run("silu", [X], X.shape), X / (1 + np.exp(-X)))
    ang = rng.standard_normal((4, 3)).astype(np.float32)
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    ref = X * cos + np.concatenate([-X[:, 3:], X[:, :3]], -1) * sin
    np.testing.assert_allclose(run("rope", [X, cos, sin], X.shape), ref, rtol=1e-6)


def test_quantization_ops():
    q = run("quantize", [X], X.shape, "int8", scale=0.02, zero_point=0, bits=8)
    assert np.array_equal(q, qmath.quantize(X, np.float32(0.02), 0, 8))
    assert np.array_equal(q, _quantize64(X, np.float32(0.02), 0, 8))
    q4 = run("quantize", [X], X.shape, "int4", scale=0.3, bits=4)
    assert np.array_equal(q4, qmath.quantize(X, np.float32(0.3), 0, 4))
    assert np.array_equal(q4, _quantize64(X, np.float32(0.3), 0, 4))
    assert np.array_equal(run("dequantize", [q], X.shape, scale=0.02),
                          qmath.dequantize(q, np.float32(0.02)))
    acc = rng.integers(-20000, 20000, (4, 6)).astype(np.int32)
    rq = run("requantize", [acc], X.shape, "int8", multiplier=0.003)
    assert np.array_equal(rq, qmath.requantize(acc, np.float32(0.003)))
    assert np.array_equal(rq, _quantize64(acc * np.float64(np.float32(0.003)), 1.0, 0, 8))
    sc = rng.random(6).astype(np.float32)
    assert np.array_equal(run("dequant_scale", [acc, sc], X.shape),
                          acc.astype(np.float32) * sc)
    assert math.isfinite(float(run("sum", [X], (), axis=None)))


def test_layer_record_writes_several_outputs():
    """A whole-layer record: a numerics layer kernel (split), constants as arrays, a
    quantized input read back as real values, one destination per output."""
    st = MemoryStore({"hbm": 1 << 16})
    q = np.arange(-12, 12, dtype=np.int8).reshape(4, 6)
    st.write("hbm", 0, q)
    c = np.ones((4, 6), np.float32)
    p = {"op": "layer", "space": "hbm", "input_addrs": [0], "input_shapes": [(4, 6)],
         "input_dtypes": ["int8"], "input_scales": [0.5], "kernel": "elementwise",
         "params": {"op": "add"}, "args": ["in", "const"], "consts": [c], "outputs": [0],
         "cast": ["float16"], "dst_addrs": [4096], "shapes_out": [(4, 6)],
         "dtypes_out": ["float16"]}
    split = {"op": "layer", "space": "hbm", "input_addrs": [4096], "input_shapes": [(4, 6)],
             "input_dtypes": ["float16"], "kernel": "split",
             "params": {"axis": 1, "sizes": [2, 4]}, "args": ["in"], "outputs": [1, 0],
             "dst_addrs": [8192, 12288], "shapes_out": [(4, 4), (4, 2)],
             "dtypes_out": ["float32", "float32"]}
    DataExecutor([OpRecord(0, 1, "pe0.pe_math", "math", "layer", p, []),
                  OpRecord(2, 3, "pe0.pe_math", "math", "layer", split, [])], st).run()
    real = q.astype(np.float32) * 0.5 + 1
    assert np.array_equal(st.read("hbm", 4096, (4, 6), "float16"), real.astype(np.float16))
    assert np.array_equal(st.read("hbm", 8192, (4, 4), "float32"), real[:, 2:])
    assert np.array_equal(st.read("hbm", 12288, (4, 2), "float32"), real[:, :2])
