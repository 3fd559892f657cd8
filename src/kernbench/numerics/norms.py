"""Normalisations over the trailing axes, computed in fp32 (float64 inside
numerics.wide.wide_floats)."""

from __future__ import annotations

import numpy as np

from kernbench.numerics.wide import work

__all__ = ["layernorm", "rmsnorm"]


def layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None = None, *,
              axis: int = -1, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, mean, 1/std) of LayerNormalization over the axes from `axis` on; y is in x's
    dtype, mean and 1/std are fp32 with kept dims (ONNX's optional outputs)."""
    axis = axis % x.ndim
    axes = tuple(range(axis, x.ndim))
    xf = work(x)
    mean = np.mean(xf, axis=axes, keepdims=True)
    d = xf - mean
    var = np.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + np.float32(eps))
    y = d * inv * work(gamma)
    if beta is not None:
        y = y + work(beta)
    return y.astype(x.dtype), mean, inv


def rmsnorm(x: np.ndarray, gamma: np.ndarray | None = None, *, axis: int = -1,
            eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) (· gamma) over the axes from `axis` on, in x's dtype."""
    axis = axis % x.ndim
    axes = tuple(range(axis, x.ndim))
    xf = work(x)
    ms = np.mean(xf * xf, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(ms + np.float32(eps))
    y = xf * inv
    if gamma is not None:
        y = y * work(gamma)
    return y.astype(x.dtype)
