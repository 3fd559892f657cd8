"""The math-op registry of the data pass: `@math_op("name")` functions on numpy arrays.

A function gets the list of input arrays (already read from memory or taken from the
record's immediates) and the record's params, and returns the output array, or, for a
record with several destinations (`dst_addrs`), the list of output arrays in that order;
the executor casts each to its dtype and checks its shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

MathFn = Callable[[list[np.ndarray], dict[str, Any]], Any]
MATH_OPS: dict[str, MathFn] = {}


def math_op(*names: str) -> Callable[[MathFn], MathFn]:
    """Register a math op under `names`."""
    def deco(f: MathFn) -> MathFn:
        for n in names:
            MATH_OPS[n] = f
        return f

    return deco


def widen(x: np.ndarray) -> np.ndarray:
    """f16 / bf16 / fp8 → float32; everything else unchanged (the SIMD unit computes in
    fp32)."""
    x = np.asarray(x)
    if x.dtype.itemsize < 4 and (x.dtype.kind == "f" or x.dtype.kind == "V"):
        return x.astype(np.float32)
    return x


def fl(x: np.ndarray) -> np.ndarray:
    """widen, and integers as float32."""
    x = widen(x)
    return x if x.dtype.kind == "f" else x.astype(np.float32)
