"""Wide floats: the kernels compute in float64 instead of float32 (for calibration).

numpy picks SIMD kernels per CPU at run time. Elementwise +, -, ×, ÷ and sqrt are
correctly rounded on every path, but float32 sums (mean, variance, softmax's
denominator), exp / tanh / erf / power and BLAS matmuls are not: their last bits follow
the CPU. A compiler that derives constants from such values (calibrated activation scales,
kernbench.compiler.quantize) would write a program that follows the CPU too.

Inside `with wide_floats():` the float kernels of this package widen their float inputs
to float64 and compute in float64 (`widen_float` in numerics.layers, `work`). Two CPUs
then differ by float64 rounding (~1e-16 relative) instead of float32 rounding (~1e-7),
far below anything a calibrated constant is rounded to (compiler.quantize snaps scales
to `quant.CALIB_MANTISSA_BITS`). Integer math (quantized products) is exact in both modes.
Outside the context nothing changes: the interpreter and the data pass compute in float32,
as the hardware's numerics say. The blocked attention (numerics.flash) stays float32: the
compiler introduces it after calibration.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["wide_floats", "is_wide", "work_dtype", "work"]

_WIDE: ContextVar[bool] = ContextVar("kernbench_wide_floats", default=False)


@contextmanager
def wide_floats() -> Iterator[None]:
    """Compute every float kernel in float64 while the context is open."""
    token = _WIDE.set(True)
    try:
        yield
    finally:
        _WIDE.reset(token)


def is_wide() -> bool:
    """Whether float kernels compute in float64 now."""
    return _WIDE.get()


def work_dtype() -> np.dtype:
    """The dtype float kernels compute in: float32, or float64 inside `wide_floats`."""
    return np.dtype(np.float64 if _WIDE.get() else np.float32)


def work(x: np.ndarray) -> np.ndarray:
    """`x` as the working float dtype (`work_dtype`)."""
    return np.asarray(x).astype(work_dtype())
