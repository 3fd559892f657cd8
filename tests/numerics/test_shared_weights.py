"""A compile's weights quantized once (`quant.shared_weights`): the calibration run and the
lowering get the same integers and scales as a fresh `quantize_weight`, read-only, and only
for arrays nothing can write; the wide GEMM kernels quantize a float32 weight as it is,
which gives what its float64 widening gave (checked against float64 numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.numerics import quant as qmath
from kernbench.numerics.layers import run_layer
from kernbench.numerics.wide import wide_floats

RNG = np.random.default_rng(11)


def _weight() -> np.ndarray:
    w = RNG.standard_normal((48, 40)).astype(np.float32)
    w.flags.writeable = False
    return w


@pytest.mark.parametrize("bits,axis", [(8, -1), (4, None), (16, -1)])
def test_shared_results_equal_fresh_ones(bits, axis):
    w = _weight()
    q0, s0 = qmath.quantize_weight(w, bits, axis)
    with qmath.shared_weights():
        q1, s1 = qmath.quantize_weight(w, bits, axis)
        q2, s2 = qmath.quantize_weight(w, bits, axis)
    assert q1 is q2 and s1 is s2  # the second call is the first one's result
    np.testing.assert_array_equal(q1, q0)
    np.testing.assert_array_equal(s1, s0)
    assert q1.dtype == q0.dtype and s1.dtype == s0.dtype
    assert not q1.flags.writeable and not s1.flags.writeable


def test_writable_and_other_keys_are_not_shared():
    w = _weight()
    ww = w.copy()  # writable: it could change between two calls
    with qmath.shared_weights():
        qa, _ = qmath.quantize_weight(ww, 8)
        ww[:, 0] = -ww[:, 0]
        qb, _ = qmath.quantize_weight(ww, 8)
        assert qa is not qb
        np.testing.assert_array_equal(qb[:, 0], -qa[:, 0])  # the changed values' integers
        assert qmath.quantize_weight(w, 8, -1)[0] is not qmath.quantize_weight(w, 8, None)[0]
        assert qmath.quantize_weight(w, 8)[0] is not qmath.quantize_weight(w, 4)[0]
    # outside the context nothing is kept
    assert qmath.quantize_weight(w, 8)[0] is not qmath.quantize_weight(w, 8)[0]


def _gemm64(x: np.ndarray, w: np.ndarray, b: np.ndarray, sx: float) -> np.ndarray:
    """int8 x (static scale) times int8 w (per column), dequantized, + b: float64 numpy."""
    w64 = w.astype(np.float64)
    sw = np.maximum(-w64.min(0), w64.max(0)).astype(np.float32) / np.float32(127)
    wq = np.clip(np.rint(w.astype(np.float32) / sw), -128, 127)
    xq = np.clip(np.rint(x.astype(np.float32) / np.float32(sx)), -128, 127)
    acc = xq.astype(np.float64) @ wq.astype(np.float64)
    return acc.astype(np.float32) * (np.float32(sx) * sw) + b.astype(np.float64)


def test_wide_gemm_takes_float32_weight_as_widened():
    x = RNG.standard_normal((6, 48))
    w, b = _weight(), RNG.standard_normal(40).astype(np.float32)
    sx = np.float32(np.abs(x).max() / 127)
    prec = {"a_bits": 8, "w_bits": 8, "x_static": {"scale": sx, "zero_point": 0,
                                                   "signed": True}}
    with wide_floats():
        got = run_layer("gemm", [x, w, b], prec)[0]
        widened = run_layer("gemm", [x, w.astype(np.float64), b.astype(np.float64)], prec)[0]
        float_got = run_layer("gemm", [x, w, b], {})[0]
    assert got.dtype == np.float64 and float_got.dtype == np.float64
    np.testing.assert_array_equal(got, widened)
    np.testing.assert_allclose(got, _gemm64(x, w, b, sx), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(float_got, x @ w.astype(np.float64) + b, rtol=1e-12)
