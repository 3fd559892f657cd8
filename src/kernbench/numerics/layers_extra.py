"""More whole-layer kernels of the IR (ONNX semantics): SCATTER_ELEMENTS, SCATTER_ND,
GROUP_NORM (InstanceNormalization is GroupNormalization with one channel per group),
LOG_SOFTMAX, HARDMAX, TRILU, ONE_HOT, DEPTH_TO_SPACE, SPACE_TO_DEPTH.

Plain params only; float math of the norms and log-softmax in fp32, results in the
input's dtype.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError
from kernbench.numerics.wide import work

__all__ = ["scatter_elements", "scatter_nd", "group_norm", "log_softmax", "hardmax", "trilu",
           "one_hot", "depth_to_space", "space_to_depth"]

_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _combine(reduction: str, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    if reduction == "none":
        return new
    f = _UFUNC.get(reduction)
    if f is None:
        raise KernelError(f"unknown scatter reduction {reduction!r}")
    return f(old, new)


def scatter_elements(data: np.ndarray, idx: np.ndarray, upd: np.ndarray, *, axis: int,
                     reduction: str = "none") -> np.ndarray:  # fmt: skip
    """data with upd written at idx along `axis` (negative indices wrap), in element order,
    combined by `reduction` (none / add / mul / max / min)."""
    out = np.array(data, copy=True)
    axis %= data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[axis] = int(idx[pos])
        t = tuple(tgt)
        out[t] = _combine(reduction, out[t], upd[pos])
    return out


def scatter_nd(data: np.ndarray, idx: np.ndarray, upd: np.ndarray, *,
               reduction: str = "none") -> np.ndarray:  # fmt: skip
    """data with upd slices written at the index tuples of idx (last axis), in order."""
    out = np.array(data, copy=True)
    for pos in np.ndindex(*idx.shape[:-1]):
        t = tuple(int(i) for i in idx[pos])
        out[t] = _combine(reduction, out[t], upd[pos])
    return out


def group_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, groups: int,
               eps: float, per_channel_affine: bool) -> np.ndarray:  # fmt: skip
    """(x - mean) / sqrt(var + eps) per (batch, group) over channels-in-group and spatial
    dims, then scale · + bias per channel (per group if not `per_channel_affine`)."""
    n, c = x.shape[0], x.shape[1]
    xf = work(x).reshape(n, groups, -1)
    mean = xf.mean(axis=2, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((xf - mean) / np.sqrt(var + np.float32(eps))).reshape(x.shape)
    sc, bi = work(scale), work(bias)
    if not per_channel_affine:  # GroupNormalization opset 18: one scale per group
        sc, bi = np.repeat(sc, c // groups), np.repeat(bi, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (y * sc.reshape(shape) + bi.reshape(shape)).astype(x.dtype)


def log_softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """x - max - log(sum(exp(x - max))) along `axis`, in x's dtype."""
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    m = np.max(xf, axis=axis, keepdims=True)
    s = xf - m
    return (s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))).astype(x.dtype)


def hardmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """1 at the first maximum along `axis`, 0 elsewhere."""
    i = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, i, 1, axis=axis)
    return out


def trilu(x: np.ndarray, k: np.ndarray | None = None, *, upper: bool) -> np.ndarray:
    """Upper (lower) triangle of the last two axes from diagonal k; the rest zero."""
    kk = int(k.reshape(-1)[0]) if k is not None else 0
    return np.triu(x, kk) if upper else np.tril(x, kk)


def one_hot(idx: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int
            ) -> np.ndarray:  # fmt: skip
    """values[1] where the position along the new `axis` equals idx (negative wraps),
    values[0] elsewhere."""
    d = int(np.asarray(depth).reshape(-1)[0])
    ax = axis % (idx.ndim + 1)
    i = np.where(idx < 0, idx + d, idx).astype(np.int64)
    hot = np.expand_dims(i, ax) == np.arange(d).reshape(
        [d if a == ax else 1 for a in range(idx.ndim + 1)])  # fmt: skip
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def depth_to_space(x: np.ndarray, *, blocksize: int, mode: str) -> np.ndarray:
    """DepthToSpace of NCHW x (DCR or CRD channel order)."""
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(x: np.ndarray, *, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """SpaceToDepth of NCHW x (DCR or CRD channel order)."""
    n, c, h, w = x.shape
    b = blocksize
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(*perm)
    return t.reshape(n, c * b * b, h // b, w // b)
