"""Data movement of the IR: gathers, slices, concatenation, reshapes, the KV cache update.

Indices may be negative (counted from the end, as ONNX). Every function returns a new
array or a view the caller must not write to.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics import quant as qmath
from kernbench.numerics.errors import KernelError

__all__ = ["embedding", "gather", "gather_elements", "gather_nd", "slice_", "concat",
           "expand", "transpose", "split", "reshape", "kv_update"]


def _in_range(idx: np.ndarray, n: int, what: str) -> np.ndarray:
    """`idx` as int64, refused (KernelError) when an index lies outside [-n, n): ONNX
    gives such an index no meaning. A model's position table read past its end (a
    sequence longer than the model's context) is the usual cause."""
    idx = idx.astype(np.int64)
    if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
        bad = int(idx.max()) if int(idx.max()) >= n else int(idx.min())
        raise KernelError(f"index {bad} is outside the {n} {what} (a sequence longer "
                          "than the model's context?)")
    return idx


def embedding(idx: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rows of `table` picked by `idx` (any shape)."""
    return np.take(table, _in_range(idx, table.shape[0], "rows of the table"), axis=0)


def gather(data: np.ndarray, idx: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX Gather along `axis`."""
    n = data.shape[axis]
    return np.take(data, _in_range(idx, n, f"entries of axis {axis}"), axis=axis)


def gather_elements(data: np.ndarray, idx: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX GatherElements: out[i][j] = data[idx[i][j]][j] (axis 0), etc."""
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take_along_axis(data, idx, axis=axis)


def gather_nd(data: np.ndarray, idx: np.ndarray, *, batch_dims: int = 0) -> np.ndarray:
    """ONNX GatherND with `batch_dims` leading batch axes."""
    idx = idx.astype(np.int64)
    bd = batch_dims
    bshape = data.shape[:bd]
    nb = int(np.prod(bshape)) if bd else 1
    d2 = data.reshape((nb,) + data.shape[bd:])
    i2 = idx.reshape((nb,) + idx.shape[bd:])
    k = idx.shape[-1]
    outs = []
    for b in range(nb):
        ib = i2[b].reshape(-1, k)
        dims = np.array(d2.shape[1:1 + k])
        ib = np.where(ib < 0, ib + dims, ib)
        outs.append(d2[b][tuple(ib.T)])
    out = np.stack(outs)
    return out.reshape(bshape + idx.shape[bd:-1] + data.shape[bd + k:])


def slice_(x: np.ndarray, *, starts: list[int], ends: list[int], steps: list[int]) -> np.ndarray:
    """x[starts:ends:steps] per leading axis; a negative step with a negative end runs to
    the beginning (the importer's normalised ONNX Slice)."""
    sl = []
    for s, e, p in zip(starts, ends, steps, strict=True):
        sl.append(slice(s, None if (p < 0 and e < 0) else e, p))
    return x[tuple(sl)]


def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)


def expand(x: np.ndarray, *, shape: list[int]) -> np.ndarray:
    return np.broadcast_to(x, shape).copy()


def transpose(x: np.ndarray, *, perm: list[int] | None = None) -> np.ndarray:
    return np.transpose(x, perm)


def reshape(x: np.ndarray, *, shape: list[int]) -> np.ndarray:
    return x.reshape(shape)


def split(x: np.ndarray, *, axis: int, sizes: list[int]) -> list[np.ndarray]:
    """Consecutive pieces of `sizes` along `axis`."""
    idx = np.cumsum(sizes)[:-1]
    return list(np.split(x, idx, axis=axis))


def kv_update(past: np.ndarray, new: np.ndarray, *, axis: int = 2, kv_bits: int | str | None = None,
              static_scale: np.ndarray | None = None) -> np.ndarray:
    """concat(past, new) along `axis`, stored at the cache precision: integer `kv_bits`
    fake-quantizes (with `static_scale` when the compiler calibrated one, else a
    dynamic symmetric scale); "fp16" / "bf16" round to that float."""
    y = np.concatenate([past, new], axis=axis)
    if isinstance(kv_bits, int) and y.dtype.kind == "f" and static_scale is not None:
        y = qmath.fake_quant(y, kv_bits, scale=static_scale)
    elif isinstance(kv_bits, int) and y.dtype.kind == "f":
        y = qmath.fake_quant(y, kv_bits)
    elif kv_bits in ("fp16", "bf16"):
        y = qmath.round_to_float(y, kv_bits)
    return y
