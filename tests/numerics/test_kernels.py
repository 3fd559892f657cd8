"""The numerics kernels against independent references: closed forms in float64,
straightforward loops, and onnx.reference for the ONNX-defined ops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from kernbench.numerics import activations, linalg, norms, shape
from kernbench.numerics import quant as qmath
from kernbench.numerics.attention import attention
from kernbench.numerics.elementwise import cast, elementwise
from kernbench.numerics.reduce import reduce
from kernbench.numerics.rope import rope, rope_interleaved
from kernbench.numerics.softmax import attention_probs, softmax

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu

rng = np.random.default_rng(11)


def onnx_ref(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, **attrs) -> list:
    """Run one ONNX node with onnx.reference (the second, independent reference)."""
    names = list(inputs)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, inputs)


def test_erf_gelu_silu_against_closed_forms():
    small = rng.standard_normal(100).astype(np.float32) * 3
    big = rng.standard_normal(5000).astype(np.float32) * 3  # the rational approximation
    for x in (small, big):
        ref = np.array([math.erf(float(v)) for v in x])
        np.testing.assert_allclose(activations.erf(x), ref, atol=2e-7)
    ref_gelu = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in small.tolist()])
    np.testing.assert_allclose(activations.gelu(small), ref_gelu, rtol=1e-6, atol=1e-6)
    t = np.array([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
                  for v in small.tolist()])
    np.testing.assert_allclose(activations.gelu(small, "tanh"), t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(activations.silu(small), [v / (1 + math.exp(-v))
                                                         for v in small.tolist()], rtol=1e-6)
    assert activations.gelu(small.astype(np.float16)).dtype == np.float16


def test_layernorm_rmsnorm_against_float64():
    x = rng.standard_normal((3, 4, 8)).astype(np.float32)
    g, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    y, mean, inv = norms.layernorm(x, g, b, axis=-1, eps=1e-5)
    np.testing.assert_allclose(y, (x64 - mu) / np.sqrt(var + 1e-5) * g + b, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(mean, mu, atol=1e-6)
    np.testing.assert_allclose(inv, 1 / np.sqrt(var + 1e-5), rtol=1e-5)
    (ort_y,) = onnx_ref("LayerNormalization", {"x": x, "g": g, "b": b}, axis=-1, epsilon=1e-5)
    np.testing.assert_allclose(y, ort_y, rtol=1e-5, atol=1e-5)
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(norms.rmsnorm(x, g, axis=2, eps=1e-6), rms, rtol=1e-5, atol=1e-6)


def test_softmax_and_masked_attention_probs():
    s = rng.standard_normal((2, 3, 5)).astype(np.float32)
    e = np.exp(s.astype(np.float64) - s.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax(s), e / e.sum(-1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(softmax(s, 1), onnx_ref("Softmax", {"x": s}, axis=1)[0],
                               rtol=1e-6)
    mask = np.zeros((3, 5), np.float32)
    mask[:, 4] = -np.inf
    p = attention_probs(s, mask, causal_offset=-1)  # row 0 sees nothing
    for i in range(3):
        allowed = [j for j in range(5) if j <= i - 1 and j != 4]
        for bi in range(2):
            want = np.zeros(5)
            if allowed:
                w = np.exp(s[bi, i, allowed].astype(np.float64))
                want[allowed] = w / w.sum()
            np.testing.assert_allclose(p[bi, i], want, rtol=1e-6, atol=1e-7)


def test_rope_half_and_interleaved_against_rotation():
    x = rng.standard_normal((4, 8)).astype(np.float32)
    ang = rng.standard_normal((4, 4))
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    half = rope(x, np.concatenate([c, c], -1), np.concatenate([s, s], -1))
    inter = rope_interleaved(x, c, s)
    for r in range(4):
        for i in range(4):
            z = complex(x[r, i], x[r, i + 4]) * complex(math.cos(ang[r, i]), math.sin(ang[r, i]))
            assert half[r, i] == pytest.approx(z.real, abs=1e-5)
            assert half[r, i + 4] == pytest.approx(z.imag, abs=1e-5)
            z = complex(x[r, 2 * i], x[r, 2 * i + 1]) * complex(math.cos(ang[r, i]),
                                                                 math.sin(ang[r, i]))
            assert inter[r, 2 * i] == pytest.approx(z.real, abs=1e-5)
            assert inter[r, 2 * i + 1] == pytest.approx(z.imag, abs=1e-5)


def test_attention_float_gqa_against_a_loop():
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    got = attention(q, k, v, num_heads=4, num_kv_heads=2, scale=0.35, causal_offset=2)
    for h in range(4):
        kh, vh = k[0, h // 2].astype(np.float64), v[0, h // 2].astype(np.float64)
        for i in range(3):
            sc = np.array([q[0, h, i].astype(np.float64) @ kh[j] * 0.35 if j <= i + 2
                           else -np.inf for j in range(5)])
            w = np.exp(sc - sc.max())
            np.testing.assert_allclose(got[0, h, i], (w / w.sum()) @ vh, rtol=1e-5, atol=1e-5)


def test_attention_int8_is_close_to_float():
    q, k, v = (rng.standard_normal((1, 2, 4, 16)).astype(np.float32) for _ in range(3))
    f = attention(q, k, v, num_heads=2, num_kv_heads=2, scale=0.25)
    i8 = attention(q, k, v, num_heads=2, num_kv_heads=2, scale=0.25, a_bits=8, kv_bits=8)
    assert np.abs(i8 - f).max() < 0.05 and not np.array_equal(i8, f)


def test_te_matmul_int8_equals_explicit_integer_math():
    x = rng.standard_normal((5, 16)).astype(np.float32)
    w = rng.standard_normal((16, 6)).astype(np.float32)
    got = linalg.te_matmul(x, w, a_bits=8, w_bits=8)
    sx = np.abs(x).max() / 127
    sw = np.abs(w).max(0) / 127
    xq = np.clip(np.rint(x / np.float32(sx)), -128, 127).astype(np.int64)
    wq = np.clip(np.rint(w / sw.astype(np.float32)), -128, 127).astype(np.int64)
    np.testing.assert_allclose(got, (xq @ wq) * (np.float32(sx) * sw), rtol=1e-6)
    np.testing.assert_allclose(linalg.te_matmul(x, w), x.astype(np.float64) @ w, rtol=1e-5,
                               atol=1e-5)


def test_conv_nd_and_nhwc_against_loops():
    x = rng.standard_normal((1, 4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)  # group 2
    y = linalg.conv_nd(x, w, [2, 1], [1, 0, 1, 1], [1, 1], 2)
    (ref,) = onnx_ref("Conv", {"x": x, "w": w}, strides=[2, 1], pads=[1, 0, 1, 1], group=2)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    xi = rng.integers(-8, 8, (2, 5, 4, 3)).astype(np.int8)
    wi = rng.integers(-8, 8, (3, 2, 3, 4)).astype(np.int8)
    got = linalg.conv2d_nhwc(xi, wi, stride=2, padding=1)
    xp = np.pad(xi.astype(np.int64), [(0, 0), (1, 1), (1, 1), (0, 0)])
    ho, wo = (5 + 2 - 3) // 2 + 1, (4 + 2 - 2) // 2 + 1
    assert got.shape == (2, ho, wo, 4) and got.dtype == np.int32
    for n in range(2):
        for i in range(ho):
            for j in range(wo):
                patch = xp[n, 2 * i:2 * i + 3, 2 * j:2 * j + 2, :]
                assert np.array_equal(got[n, i, j], np.einsum("abc,abcd->d", patch, wi))


def test_integer_onnx_ops_match_onnx_reference():
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(-128, 127, (4, 5)).astype(np.int8)
    za, zb = np.uint8(7), np.int8(-2)
    sa, sb, sy, zy = np.float32(0.02), np.float32(0.05), np.float32(0.1), np.int8(3)
    (ref,) = onnx_ref("QLinearMatMul", {"a": a, "sa": np.array(sa), "za": np.array(za),
                                        "b": b, "sb": np.array(sb), "zb": np.array(zb),
                                        "sy": np.array(sy), "zy": np.array(zy)})
    got = linalg.qlinear_matmul(a, sa, np.array(za), b, sb, np.array(zb), sy, np.array(zy))
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1  # onnx rounds in float64
    (mi,) = onnx_ref("MatMulInteger", {"a": a, "b": b.view(np.uint8) // 2,
                                       "za": np.array(za), "zb": np.array(np.uint8(3))})
    assert np.array_equal(linalg.matmul_integer(a, b.view(np.uint8) // 2, za, np.uint8(3)), mi)
    x = rng.standard_normal(20).astype(np.float32)
    y, s, z = onnx_ref("DynamicQuantizeLinear", {"x": x}, n_out=3)
    gy, gs, gz = qmath.dynamic_quantize_linear(x)
    assert np.array_equal(gy, y) and gs == pytest.approx(float(s)) and gz == z


def test_shape_ops_match_onnx_reference():
    d = rng.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([[[1, -1]], [[0, 2]]], np.int64)
    assert np.array_equal(shape.gather_nd(d, idx, batch_dims=1),
                          onnx_ref("GatherND", {"d": d, "i": idx}, batch_dims=1)[0])
    ie = rng.integers(-4, 4, (2, 3, 2)).astype(np.int64)
    assert np.array_equal(shape.gather_elements(d, ie, axis=2),
                          onnx_ref("GatherElements", {"d": d, "i": ie}, axis=2)[0])
    gi = np.array([[0, 2], [1, 1]], np.int64)
    assert np.array_equal(shape.gather(d, gi, axis=1), onnx_ref("Gather", {"d": d, "i": gi},
                                                                axis=1)[0])
    assert np.array_equal(shape.slice_(d, starts=[0, 2, 3], ends=[2, -4, -5], steps=[1, -1, -2]),
                          d[0:2, 2::-1, 3::-2])
    parts = shape.split(d, axis=2, sizes=[1, 3])
    assert [p.shape for p in parts] == [(2, 3, 1), (2, 3, 3)]
    assert np.array_equal(np.concatenate(parts, 2), d)
    past, new = d[:, :, :3], d[:, :, 3:]
    kv = shape.kv_update(past[None], new[None], axis=3, kv_bits=8)
    s = np.abs(d).max() / 127
    np.testing.assert_allclose(kv[0], np.clip(np.rint(d / np.float32(s)), -128, 127) *
                               np.float32(s), rtol=1e-6)


def test_reduce_and_elementwise():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(reduce(x, op="mean", axes=[1], keepdims=True),
                               x.astype(np.float64).mean(1, keepdims=True), rtol=1e-6)
    assert reduce(np.zeros((0, 2), np.float32), op="max", axes=[0], keepdims=False).tolist() \
        == [-np.inf, -np.inf]
    a = np.array([7, -7], np.int32)
    assert elementwise(a, np.array([2, 2], np.int32), op="div").tolist() == [3, -3]
    assert cast(np.array([2.7, -2.7, 9.0], np.float16), "int4").tolist() == [2, -2, 7]
    assert elementwise(x, op="cast", to="fp16").dtype == np.float16
    with pytest.raises(ValueError, match="unknown elementwise op"):
        elementwise(x, op="nope")
