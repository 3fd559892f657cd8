"""Data-movement and selection layers of the IR: TILE, PAD, TOPK, EINSUM (ONNX semantics).

All take plain params (the importer resolved constant inputs to lists and numbers).
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError

__all__ = ["tile", "pad", "topk", "einsum", "argreduce"]


def tile(x: np.ndarray, *, repeats: list[int]) -> np.ndarray:
    """x repeated `repeats[i]` times along axis i (ONNX Tile)."""
    return np.tile(x, repeats)


def pad(x: np.ndarray, value: np.ndarray | None = None, *, pads: list[int], mode: str,
        value_attr: float = 0.0) -> np.ndarray:  # fmt: skip
    """x padded by `pads` ([begin_0.., end_0..], negative crops) in `mode` (constant /
    reflect / edge / wrap); constant mode fills with the `value` input if given."""
    rank = x.ndim
    lo, hi = pads[:rank], pads[rank:]
    # negative pads crop first; numpy pads only grow
    sl = tuple(slice(max(-a, 0), d - max(-b, 0)) for a, b, d in zip(lo, hi, x.shape, strict=True))
    x = x[sl]
    widths = [(max(a, 0), max(b, 0)) for a, b in zip(lo, hi, strict=True)]
    if mode == "constant":
        v = value_attr if value is None or value.size == 0 else value.reshape(-1)[0]
        return np.pad(x, widths, mode="constant", constant_values=v).astype(x.dtype)
    if mode in ("reflect", "edge", "wrap"):
        return np.pad(x, widths, mode=mode)
    raise KernelError(f"unknown pad mode {mode!r}")


def topk(x: np.ndarray, *, k: int, axis: int, largest: bool, sorted: bool  # noqa: A002
         ) -> list[np.ndarray]:  # fmt: skip
    """The k largest (smallest) values along `axis` and their int64 indices; ties keep
    the lower index first (ONNX TopK)."""
    key = -x if largest else x
    if x.dtype.kind == "u" and largest:
        key = np.iinfo(x.dtype).max - x
    idx = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    vals = np.take_along_axis(x, idx, axis=axis)
    return [vals, idx.astype(np.int64)]


def einsum(*xs: np.ndarray, equation: str) -> np.ndarray:
    """numpy.einsum of the inputs (ONNX Einsum), in the first input's dtype (bf16 /
    fp16 operands are summed in fp32: numpy's einsum does not take bf16)."""
    ys = [x.astype(np.float32) if x.dtype.kind in "fV" and x.dtype.itemsize < 4 else x
          for x in xs]  # fmt: skip
    return np.asarray(np.einsum(equation, *ys)).astype(xs[0].dtype)


def argreduce(x: np.ndarray, *, op: str, axis: int, keepdims: bool,
              select_last_index: bool) -> np.ndarray:  # fmt: skip
    """int64 index of the max (argmax) / min (argmin) along `axis`; the first one on a
    tie unless `select_last_index` (ONNX ArgMax / ArgMin)."""
    f = np.argmax if op == "argmax" else np.argmin
    if select_last_index:
        flipped = np.flip(x, axis=axis)
        y = x.shape[axis] - 1 - f(flipped, axis=axis)
    else:
        y = f(x, axis=axis)
    if keepdims:
        y = np.expand_dims(y, axis)
    return np.asarray(y).astype(np.int64)
