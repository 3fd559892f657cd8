"""The calibration's CPU independence (ADR-0940): inside `wide_floats` the float kernels
compute in float64 (checked against float64 numpy written here), outside they stay float32;
a calibrated scale is max|x| / qmax rounded up to 16 significant bits, which a 1e-12
relative change of the values does not move."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from kernbench.numerics import quant as qmath
from kernbench.numerics.layers import run_layer
from kernbench.numerics.wide import is_wide, wide_floats, work_dtype

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 5, 64)).astype(np.float32)
G = RNG.standard_normal(64).astype(np.float32)
X64, G64 = X.astype(np.float64), G.astype(np.float64)


def _softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm64(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g


def _rmsnorm64(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    # the kernel's constants are the fp32 ones of the hardware, in both modes
    c, a = float(np.float32(math.sqrt(2 / math.pi))), float(np.float32(0.044715))
    return 0.5 * x * (1 + np.tanh(c * (x + a * x * x * x)))


CASES = [
    ("softmax", [X], {"axis": -1}, lambda: _softmax64(X64)),
    ("layernorm", [X, G], {"axis": -1, "eps": 1e-5}, lambda: _layernorm64(X64, G64)),
    ("rmsnorm", [X, G], {"axis": -1, "eps": 1e-6}, lambda: _rmsnorm64(X64, G64)),
    ("gelu", [X], {"approximate": "tanh"}, lambda: _gelu_tanh64(X64)),
    ("silu", [X], {}, lambda: X64 / (1 + np.exp(-X64))),
    ("gemm", [X, RNG.standard_normal((64, 16)).astype(np.float32)], {}, None),
]


@pytest.mark.parametrize(("name", "args", "params", "ref"), CASES, ids=[c[0] for c in CASES])
def test_wide_kernels_compute_in_float64(name, args, params, ref) -> None:  # noqa: ANN001
    if ref is None:  # gemm: x @ w in float64
        x, w = args
        want = x.astype(np.float64) @ w.astype(np.float64)
    else:
        want = ref()
    with wide_floats():
        got = run_layer(name, list(args), params)[0]
    assert got.dtype == np.float64
    # float64 rounding only: far below float32's 6e-8
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    narrow = run_layer(name, list(args), params)[0]
    assert narrow.dtype == np.float32  # outside the context: the hardware's fp32
    assert np.max(np.abs(narrow - want)) > 1e-12 * np.max(np.abs(want))


def test_the_context_ends_with_its_block() -> None:
    assert not is_wide() and work_dtype() == np.float32
    with wide_floats():
        assert is_wide() and work_dtype() == np.float64
    assert not is_wide()


def _snapped(s: Fraction) -> Fraction:
    """The least number of 16 significant bits that is >= s > 0 (exact)."""
    e = 0
    while s >= Fraction(2) ** e:
        e += 1
    while s < Fraction(2) ** (e - 1):
        e -= 1
    step = Fraction(2) ** (e - 16)
    return math.ceil(s / step) * step


def test_calibrated_scale_is_the_range_rounded_up_to_16_bits() -> None:
    rng = np.random.default_rng(1)
    for bits in (4, 8, 16):
        for _ in range(200):
            x = rng.standard_normal(rng.integers(1, 300)) * 10.0 ** rng.uniform(-6, 6)
            got = qmath.calibrated_scale(x, bits)
            assert got.dtype == np.float32 and got.shape == ()
            s = Fraction(float(np.max(np.abs(x)))) / ((1 << (bits - 1)) - 1)
            assert Fraction(float(got)) == _snapped(s)
            assert s <= Fraction(float(got)) < s * (1 + Fraction(1, 1 << 15))


def test_calibrated_scale_of_empty_zero_nan_and_inf_ranges() -> None:
    assert qmath.calibrated_scale(np.zeros(4), 8) == 1.0
    assert qmath.calibrated_scale(np.zeros(0), 8) == 1.0
    assert qmath.calibrated_scale(np.array([1.0, np.nan]), 8) == 1.0
    assert qmath.calibrated_scale(np.array([1.0, -np.inf]), 8) == np.inf


def test_a_last_bit_change_of_the_values_does_not_move_the_scale() -> None:
    """Two CPUs' float64 results differ by ~1e-16 relative; 1e-12 is 10^4 times that.
    The scale moves only when the range crosses a multiple of 2^-16 of itself: among
    2000 seeded ranges none does."""
    rng = np.random.default_rng(2)
    for _ in range(2000):
        x = rng.standard_normal(64) * 10.0 ** rng.uniform(-3, 3)
        other = x * (1 + 1e-12 * rng.standard_normal(64))
        assert qmath.calibrated_scale(x, 8) == qmath.calibrated_scale(other, 8)
