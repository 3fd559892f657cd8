"""Reductions of the IR (REDUCE: mean, sum, max, min, prod, l1, l2, logsum, logsumexp,
sumsquare over `axes`; argmax, argmin)."""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError
from kernbench.numerics.shape_extra import argreduce

__all__ = ["reduce", "MORE"]


def _wide(x: np.ndarray) -> np.ndarray:
    # sub-32-bit floats accumulate in fp32
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype.itemsize < 4 else x


def _log_sum_exp(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    xf = _wide(x)
    if xf.size == 0:
        return np.log(np.sum(np.exp(xf), axis=ax, keepdims=kd))
    m = np.max(xf, axis=ax, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(xf - m), axis=ax, keepdims=True)) + m
    return s if kd else np.squeeze(s, axis=ax)


#: ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare
MORE = {
    "prod": lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd),
    "l1": lambda x, ax, kd: np.sum(np.abs(x), axis=ax, keepdims=kd),
    "l2": lambda x, ax, kd: np.sqrt(np.sum(np.square(_wide(x)), axis=ax, keepdims=kd)),
    "logsum": lambda x, ax, kd: np.log(np.sum(_wide(x), axis=ax, keepdims=kd)),
    "logsumexp": _log_sum_exp,
    "sumsquare": lambda x, ax, kd: np.sum(np.square(x), axis=ax, keepdims=kd),
}


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
    elif op in MORE:
        y = MORE[op](x, ax, kd)
    else:
        raise KernelError(f"unknown reduce op {op!r}")
    return np.asarray(y).astype(x.dtype)
