"""Reductions of the IR (REDUCE: mean, sum, max, min over `axes`; argmax, argmin)."""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError
from kernbench.numerics.shape_extra import argreduce

__all__ = ["reduce"]


def _red_shape(shape: tuple[int, ...], axes: tuple[int, ...], kd: bool) -> tuple[int, ...]:
    return tuple((1 if i in axes else d) for i, d in enumerate(shape) if kd or i not in axes)


def reduce(x: np.ndarray, *, op: str, axes: list[int], keepdims: bool,
           select_last_index: bool = False) -> np.ndarray:  # fmt: skip
    """`op` over `axes` in x's dtype. mean of f16 accumulates in f64; max / min of an
    empty tensor give -inf / +inf (ONNX ReduceMax / ReduceMin); argmax / argmin (one
    axis) give int64 indices (numerics.shape_extra.argreduce)."""
    if op in ("argmax", "argmin"):
        return argreduce(x, op=op, axis=axes[0], keepdims=keepdims,
                         select_last_index=select_last_index)
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
