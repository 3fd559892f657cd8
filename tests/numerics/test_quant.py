from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.numerics import quant as qmath

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu


def test_quantize_rounds_half_to_even_and_saturates():
    q = qmath.quantize(np.array([0.5, 1.5, 2.5, -0.5, 1000.0, -1000.0]), np.float32(1.0), 0, 8)
    assert q.tolist() == [0, 2, 2, 0, 127, -128]
    assert q.dtype == np.int8
    u = qmath.quantize(np.array([-1.0, 0.0, 300.0]), np.float32(1.0), 128, 8, signed=False)
    assert u.tolist() == [127, 128, 255] and u.dtype == np.uint8


def test_weight_per_channel_symmetric():
    w = np.array([[1.0, -0.5], [-2.0, 0.25]], np.float32)
    q, s = qmath.quantize_weight(w, 8, axis=-1)
    np.testing.assert_allclose(s, [2.0 / 127, 0.5 / 127], rtol=1e-6)
    assert q[:, 0].tolist() == [64, -127] and q[:, 1].tolist() == [-127, 64]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 300), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_int_matmul_exact(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    za, zb = int(rng.integers(-5, 5)), int(rng.integers(-5, 5))
    want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    got = qmath.int_matmul(a, b, za, zb)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4200), st.integers(1, 3), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_int_matmul_exact_at_the_extremes_over_long_k(m, k, n, zero_points, seed):
    """8-bit operands at their extremes (|q - zp| up to 255), with per-row / per-column
    zero points and a batch axis, over K long enough that partial sums pass 2^24 (float32's
    exact range): every element equals numpy's int64 product."""
    rng = np.random.default_rng(seed)
    a = rng.choice(np.array([-128, 127, 126, -127], np.int8), (2, m, k))
    b = rng.choice(np.array([-128, 127, -127, 1], np.int8), (2, k, n))
    za = rng.integers(-127, 128, (m,)) if zero_points else 0
    zb = rng.integers(-127, 128, (n,)) if zero_points else 0
    want = (a.astype(np.int64) - np.asarray(za).reshape(-1, 1)) @ \
        (b.astype(np.int64) - np.asarray(zb))
    got = qmath.int_matmul(a, b, za, zb)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1,
                max_size=24),
       st.sampled_from([1e-30, 0.01, 0.7, 3.0]), st.sampled_from([(8, True), (4, True),
                                                                   (8, False), (16, True)]),
       st.sampled_from([0, 3, -5]))
def test_quantize_saturates_every_float_the_same_way(vals, scale, bits_signed, zp):
    """quantize against a per-element reference: rint of the float32 quotient plus the zero
    point, NaN to the zero point, the rest saturated to the range (huge finite values and
    infinities included), with and without a zero point."""
    bits, signed = bits_signed
    zp = zp if signed else abs(zp)
    x = np.array(vals, np.float32)
    lo, hi = qmath.qrange(bits, signed)
    with np.errstate(all="ignore"):
        r = np.rint(x / np.float32(scale))
    ts = [float(zp) if v != v else v + zp for v in r.tolist()]
    want = [hi if t >= hi else lo if t <= lo else int(t) for t in ts]
    got = qmath.quantize(x, np.float32(scale), zp, bits, signed)
    assert got.tolist() == want


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-8, 7), min_size=0, max_size=33))
def test_int4_pack_roundtrip(vals):
    q = np.array(vals, np.int8)
    packed = qmath.pack_int4(q)
    assert packed.dtype == np.uint8 and packed.size == (len(vals) + 1) // 2
    np.testing.assert_array_equal(qmath.unpack_int4(packed, len(vals)), q)


def test_int4_pack_layout_low_nibble_first():
    assert qmath.pack_int4(np.array([1, -1], np.int8)).tolist() == [0xF1]
    assert qmath.unpack_int4(np.array([0x7F], np.uint8), 2, signed=False).tolist() == [15, 7]


def test_requantize():
    acc = np.array([1000, -1000, 5, 100000], np.int32)
    y = qmath.requantize(acc, np.float32(0.01), 3, 8)
    assert y.tolist() == [13, -7, 3, 127]


def test_blocked_dequantize():
    q = np.arange(8, dtype=np.int8).reshape(4, 2)
    s = np.array([[1.0, 2.0], [10.0, 20.0]], np.float32)
    d = qmath.dequantize(q, s, 0, axis=0, block_size=2)
    np.testing.assert_array_equal(d, [[0, 2], [2, 6], [40, 100], [60, 140]])


def test_fake_quant_error_bound():
    x = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    y = qmath.fake_quant(x, 8)
    assert np.max(np.abs(x - y)) <= qmath.symmetric_scale(x, 8) / 2 + 1e-7


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(1, 600), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_int16_products_summed_over_k_never_wrap(m, k, n, seed):
    """16-bit integer operands accumulate exactly (int64 past int32's reach, ADR-0800):
    checked against numpy int64 on values near the int16 extremes."""
    rng = np.random.default_rng(seed)
    a = rng.integers(30000, 32768, (m, k)).astype(np.int16)
    b = (rng.integers(30000, 32768, (k, n)) * rng.choice([-1, 1], (k, n))).astype(np.int16)
    want = a.astype(np.int64) @ b.astype(np.int64)
    got = qmath.int_matmul(a, b)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == (np.int32 if qmath.accumulator_bits(a.dtype, b.dtype, k) == 32
                         else np.int64)


def test_accumulator_bits_by_width_and_k():
    assert qmath.accumulator_bits(np.int8, np.int8, 4096) == 32
    assert qmath.accumulator_bits(np.int16, np.int16, 2) == 64
    assert qmath.accumulator_bits(np.int8, np.int16, 64) == 32
    assert qmath.accumulator_bits(np.int8, np.int16, 4096) == 64


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-2, 1), min_size=0, max_size=37))
def test_int2_pack_roundtrip_four_per_byte(vals):
    q = np.array(vals, np.int8)
    packed = qmath.pack_bits(q, 2)
    assert packed.dtype == np.uint8 and packed.size == (len(vals) + 3) // 4
    np.testing.assert_array_equal(qmath.unpack_bits(packed, len(vals), 2), q)
    if len(vals) >= 4:  # lowest bits first, two's complement
        want = sum((int(v) & 3) << (2 * i) for i, v in enumerate(vals[:4]))
        assert int(packed[0]) == want


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from([None, 0, 1, -1]),
       st.integers(0, 2**31 - 1), st.sampled_from(["normal", "zeros", "nan", "inf"]))
def test_symmetric_scale_is_max_abs_over_qmax(m, n, axis, seed, kind):
    """The scale is max|x| / 127 per tensor or per slice (from the two ends of the range,
    not an array of absolute values): checked against np.abs, with signed zeros, NaN and
    infinities, which give 1 (zero range), NaN and inf as before."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(m, n)).astype(np.float32)
    if kind == "zeros":
        x = np.where(rng.random((m, n)) < 0.5, np.float32(-0.0), np.float32(0.0))
    elif kind != "normal":
        x.flat[rng.integers(x.size)] = np.nan if kind == "nan" else -np.inf
    if axis is None:
        amax = np.max(np.abs(x))
    else:
        amax = np.max(np.abs(x), axis=tuple(i for i in range(2) if i != axis % 2))
    want = (np.asarray(amax, np.float32) / np.float32(127)).astype(np.float32)
    want = np.where(want > 0, want, np.float32(1.0))
    with np.errstate(invalid="ignore"):
        got = qmath.symmetric_scale(x, 8, axis)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32
