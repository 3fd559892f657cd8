"""Window and scan kernels of the IR: POOL (ONNX MaxPool / AveragePool, N-D, NCHW...)
and CUMSUM (ONNX CumSum).

`pool(x, mode=..., kernel_shape=..., strides=..., pads=..., dilations=..., ceil_mode=...,
count_include_pad=...)` pools the spatial axes 2.. of `x`; `pads` is ONNX's
[lo_0, .., lo_k, hi_0, .., hi_k]. The window sum of an average pool is accumulated in
fp32 in row-major kernel-offset order, then divided by the window's element count.
`cumsum(x, axis=..., exclusive=..., reverse=...)` is ONNX CumSum in x's dtype.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from kernbench.numerics.errors import KernelError

__all__ = ["pool", "pool_out_dims", "cumsum"]


def pool_out_dims(in_dims: list[int], kernel_shape: list[int], strides: list[int],
                  pads: list[int], dilations: list[int], ceil_mode: bool) -> list[int]:
    """Spatial output dims (ONNX: with ceil_mode a last window must start inside the
    input or its left pad, else it is dropped)."""
    nsp = len(in_dims)
    out = []
    for i in range(nsp):
        span = (kernel_shape[i] - 1) * dilations[i] + 1
        total = in_dims[i] + pads[i] + pads[i + nsp] - span
        if total < 0:
            raise KernelError(f"pool window {span} larger than padded input on axis {2 + i}")
        o = (math.ceil if ceil_mode else math.floor)(total / strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= in_dims[i] + pads[i]:
            o -= 1
        out.append(o)
    return out


def pool(x: np.ndarray, *, mode: str, kernel_shape: list[int], strides: list[int],
         pads: list[int], dilations: list[int], ceil_mode: bool = False,
         count_include_pad: bool = False) -> np.ndarray:
    """ONNX MaxPool (`mode="max"`) or AveragePool (`mode="avg"`) of x (see module doc)."""
    if mode not in ("max", "avg"):
        raise KernelError(f"unknown pool mode {mode!r}")
    nsp = x.ndim - 2
    sp = list(x.shape[2:])
    out = pool_out_dims(sp, kernel_shape, strides, pads, dilations, ceil_mode)
    # extra right padding so that every (ceil-mode) window slice is in bounds
    need = [(out[i] - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1
            for i in range(nsp)]
    hi = [max(0, need[i] - sp[i] - pads[i]) for i in range(nsp)]
    width = [(0, 0), (0, 0)] + [(pads[i], hi[i]) for i in range(nsp)]
    acc_dt = np.float32 if mode == "avg" and x.dtype.kind == "f" else x.dtype
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x.astype(acc_dt), width, constant_values=0 if mode == "avg" else fill)
    # which padded positions count in an average: the input, plus the explicit pads
    # when count_include_pad (never the ceil-mode overhang)
    mask = np.zeros(xp.shape[2:], np.float32)
    if count_include_pad:
        mask[tuple(slice(0, pads[i] + sp[i] + pads[i + nsp]) for i in range(nsp))] = 1
    else:
        mask[tuple(slice(pads[i], pads[i] + sp[i]) for i in range(nsp))] = 1
    res: np.ndarray | None = None
    cnt = np.zeros(out, np.float32)
    for off in itertools.product(*(range(k) for k in kernel_shape)):
        sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                   for o, d, n, s in zip(off, dilations, out, strides, strict=True))
        win = xp[(slice(None), slice(None), *sl)]
        if res is None:
            res = win.copy()
        elif mode == "max":
            res = np.maximum(res, win)
        else:
            res = res + win
        cnt += mask[sl]
    assert res is not None
    if mode == "max":
        return res.astype(x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (res / cnt).astype(x.dtype)


def cumsum(x: np.ndarray, *, axis: int, exclusive: bool = False,
           reverse: bool = False) -> np.ndarray:
    """ONNX CumSum of x along `axis` (exclusive: the element itself is left out;
    reverse: summed from the end)."""
    y = np.flip(x, axis) if reverse else x
    c = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)),
                            np.take(c, range(c.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(c, axis) if reverse else c
