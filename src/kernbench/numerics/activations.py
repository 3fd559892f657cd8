"""Activation functions on numpy arrays (fp32 math, result in the input's float dtype).

erf is exact to float64 rounding for small arrays (math.erf per element) and within
1.2e-7 relative (Numerical Recipes erfc) for large ones, which is below fp32 resolution.
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.numerics.wide import work

__all__ = ["erf", "gelu", "silu", "sigmoid", "relu"]


def _f(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def erf(x: np.ndarray) -> np.ndarray:
    """Gauss error function; float input keeps its dtype, integers give float32."""
    return _erf_vec(x.astype(np.float64)).astype(x.dtype if x.dtype.kind == "f" else np.float32)


def _erf_vec(x: np.ndarray) -> np.ndarray:
    # per-element math.erf is exact but slow: large arrays use the rational approximation
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size < 4096 else _erf_fast(x)


def _erf_fast(x: np.ndarray) -> np.ndarray:
    # Numerical Recipes erfc approximation (fractional error < 1.2e-7), enough for fp32.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    y = t * np.exp(
        -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
            -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
                -0.82215223 + t * 0.17087277))))))))
    )  # fmt: skip
    return sign * (1.0 - y)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU: 0.5·x·(1 + erf(x/√2)), or the tanh form when `approximate` is "tanh"."""
    xf = work(x)
    if approximate == "tanh":
        c = np.float32(math.sqrt(2.0 / math.pi))
        y = 0.5 * xf * (1.0 + np.tanh(c * (xf + np.float32(0.044715) * xf * xf * xf)))
    else:
        y = 0.5 * xf * (1.0 + erf(xf * np.float32(1.0 / math.sqrt(2.0))))
    return y.astype(x.dtype)


def silu(x: np.ndarray) -> np.ndarray:
    """x · sigmoid(x) in fp32, rounded to the input dtype."""
    xf = work(x)
    return (xf / (1.0 + np.exp(-xf))).astype(x.dtype)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)); integers are computed as float32."""
    return (1.0 / (1.0 + np.exp(-_f(x)))).astype(_f(x).dtype)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))
