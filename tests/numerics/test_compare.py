"""D11 tolerances: f32 1e-5, f16 1e-3, bf16 1e-2, integers exact."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernbench.numerics.compare import compare

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu


def test_tolerances_by_dtype():
    x = np.linspace(-1, 1, 50).astype(np.float32)
    assert compare(x + 5e-6, x)["allclose"] and not compare(x + 5e-5, x)["allclose"]
    h = x.astype(np.float16)
    assert compare(h, x, dtype="f16")["allclose"]
    assert not compare(x + 5e-3, x, dtype="f16")["allclose"]
    b = x.astype(ml_dtypes.bfloat16)
    r = compare(b, x)
    assert r["dtype"] == "bfloat16" and r["allclose"] and r["cosine"] > 0.9999
    i = np.arange(10, dtype=np.int32)
    assert compare(i, i)["allclose"] and not compare(i + 1, i)["allclose"]
    assert compare(i + 1, i)["max_abs_err"] == 1.0


def test_shape_and_nan():
    assert not compare(np.zeros(3), np.zeros(4))["allclose"]
    a = np.array([1.0, np.nan], np.float32)
    assert compare(a, a)["allclose"]
    assert not compare(a, np.array([1.0, 2.0], np.float32))["allclose"]
