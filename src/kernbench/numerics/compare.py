"""Verification contract: compare an output with its reference.

| dtype | comparison | tolerance |
| f32 (and f64) | allclose | rtol = atol = 1e-5 |
| f16 | allclose | 1e-3 |
| bf16 / fp8 | allclose | 1e-2 |
| integers / bool | array_equal | exact |
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kernbench.numerics.dtypes import DTypeSpec, canon

TOLERANCES: dict[str, float] = {
    "float32": 1e-5, "float64": 1e-5, "float16": 1e-3, "bfloat16": 1e-2, "float8_e4m3fn": 1e-2,
}  # fmt: skip


def tolerance(dtype: DTypeSpec) -> float | None:
    """rtol = atol for a float dtype, None for exact (integer / bool) dtypes."""
    return TOLERANCES.get(canon(dtype))


def compare(actual: npt.ArrayLike, expected: npt.ArrayLike, dtype: DTypeSpec | None = None, *, tol: float | None = None
            ) -> dict[str, Any]:  # fmt: skip
    """{max_abs_err, cosine, allclose, dtype, tol, shape_ok}; `dtype` defaults to actual's."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    dt = canon(dtype if dtype is not None else a.dtype)
    t = tol if tol is not None else tolerance(dt)
    shape_ok = a.shape == e.shape
    out: dict[str, Any] = {"dtype": dt, "tol": t, "shape_ok": shape_ok}
    if not shape_ok:
        out.update(max_abs_err=float("inf"), cosine=0.0, allclose=False)
        return out
    af = a.astype(np.float64)
    ef = e.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(af - ef)
        fin = np.isfinite(diff)
        max_err = float(diff[fin].max()) if fin.any() else 0.0
        if not np.array_equal(np.isnan(af), np.isnan(ef)):
            max_err = float("inf")
        na, ne = np.linalg.norm(np.nan_to_num(af)), np.linalg.norm(np.nan_to_num(ef))
        cos = float(np.dot(np.nan_to_num(af).ravel(), np.nan_to_num(ef).ravel()) / (na * ne)) \
            if na > 0 and ne > 0 else (1.0 if na == ne else 0.0)
    if t is None:
        ok = bool(np.array_equal(a, e))
    else:
        ok = bool(np.allclose(af, ef, rtol=t, atol=t, equal_nan=True))
    out.update(max_abs_err=max_err, cosine=round(cos, 9), allclose=ok)
    return out
