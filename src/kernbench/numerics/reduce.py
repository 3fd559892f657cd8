"""Reductions of the IR (REDUCE: mean, sum, max, min over `axes`)."""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError

__all__ = ["reduce"]


def _red_shape(shape: tuple[int, ...], axes: tuple[int, ...], kd: bool) -> tuple[int, ...]:
    return tuple((1 if i in axes else d) for i, d in enumerate(shape) if kd or i not in axes)


def reduce(x: np.ndarray, *, op: str, axes: list[int], keepdims: bool) -> np.ndarray:
    """`op` over `axes` in x's dtype. mean of f16 accumulates in f64; max / min of an
    empty tensor give -inf / +inf (ONNX ReduceMax / ReduceMin)."""
    ax = tuple(axes)
    kd = bool(keepdims)
    if op == "mean":
        y = np.mean(x.astype(np.float64) if x.dtype.kind != "f" else x, axis=ax, keepdims=kd,
                    dtype=np.float64 if x.dtype == np.float16 else None)  # fmt: skip
    elif op == "sum":
        y = np.sum(x, axis=ax, keepdims=kd)
    elif op == "max":
        y = np.max(x, axis=ax, keepdims=kd) if x.size else np.full(
            _red_shape(x.shape, ax, kd), -np.inf, x.dtype)  # fmt: skip
    elif op == "min":
        y = np.min(x, axis=ax, keepdims=kd) if x.size else np.full(
            _red_shape(x.shape, ax, kd), np.inf, x.dtype)  # fmt: skip
    else:
        raise KernelError(f"unknown reduce op {op!r}")
    return np.asarray(y).astype(x.dtype)
