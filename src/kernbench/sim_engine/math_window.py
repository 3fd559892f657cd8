"""The data pass's window ops, all on kernbench.numerics: convolution tiles, pooling
tiles, row reductions and clamps (the CNN tiles).

- conv: a TE_CONV_TILE or VE_DWCONV_TILE. Layout `nhwc` (ifm [n, h, w, c_in], wgt
  [kh, kw, c_in/groups, c_out]) or `nchw` (ifm [n, c_in, h, w], wgt [c_out, c_in/groups,
  kh, kw]); params `strides` [h, w], `pads` [top, left, bottom, right], `dilations`,
  `groups` (older entries: `stride`, `padding`), `pad_value` (the padding, default 0);
  then + bias [c_out] (`has_bias`) and +
  the previous ofm (`accumulate`). Integers: exact int32 (wrapping like the hardware's
  accumulator); floats: fp32.
- pool: ifm [n, c, h, w] → [n, c, h_out, w_out], `numerics.pool.pool` on the tile (mode, window,
  pads of the tile, ceil_mode, count_include_pad): per output element the same window
  sum in the same order as the whole-layer kernel.
- reduce_rows: `numerics.reduce.reduce` over the last axis of [rows, length] (`reduce`: mean, sum,
  max, min), keepdims → [rows, 1].
- clip: min(max(x, lo), hi); an absent bound is not applied (ReLU = clip with lo 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.linalg import conv2d_nhwc, conv_nd
from kernbench.numerics.pool import pool
from kernbench.numerics.reduce import reduce
from kernbench.sim_engine.math_registry import fl, math_op, widen


def _geometry(p: dict[str, Any]) -> tuple[list[int], list[int], list[int], int]:
    """(strides, pads [t, l, b, r], dilations, groups) of a conv description."""
    s = int(p.get("stride", 1))
    pad = int(p.get("padding", 0))
    strides = [int(v) for v in p.get("strides") or [s, s]]
    pads = [int(v) for v in p.get("pads") or [pad] * 4]
    dil = [int(v) for v in p.get("dilations") or [1, 1]]
    return strides, pads, dil, int(p.get("groups", 1))


def _conv_tile(x: np.ndarray, w: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    strides, pads, dil, groups = _geometry(p)
    if p.get("layout", "nhwc") == "nchw":
        return conv_nd(x, w, strides, pads, dil, groups, int(p.get("pad_value", 0)))
    simple = groups == 1 and dil == [1, 1] and len(set(pads)) == 1 and strides[0] == strides[1]
    if simple:  # the 1.1 entry: K ordered (kh, kw, c_in) as before
        return conv2d_nhwc(x, w, stride=strides[0], padding=pads[0])
    y = conv_nd(np.moveaxis(x, 3, 1), np.transpose(w, (3, 2, 0, 1)), strides, pads, dil,
                groups)
    return np.moveaxis(y, 1, 3)


@math_op("conv")
def _conv(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """A convolution tile (see the module docstring)."""
    x, w = widen(ins[0]), widen(ins[1])
    integer = x.dtype.kind in "iu" and w.dtype.kind in "iu"
    x, w = (x.astype(np.int64), w.astype(np.int64)) if integer else (fl(x), fl(w))
    y = _conv_tile(x, w, p)
    rest = list(ins[2:])
    if p.get("has_bias"):
        b = rest.pop(0)
        shape = (-1, 1, 1) if p.get("layout") == "nchw" else (-1,)
        b = np.asarray(b).reshape(shape)
        y = y.astype(np.int64) + b.astype(np.int64) if integer else y + fl(b)
    if p.get("accumulate"):
        prev = rest.pop(0)
        y = y.astype(np.int64) + prev.astype(np.int64) if integer else y + fl(prev)
    # exact; the entry's accumulator dtype (int32 or int64) is applied on store
    return y.astype(np.int64) if integer else y


@math_op("pool")
def _pool(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """A pooling tile [n, c, h, w] → [n, c, h_out, w_out] (see the module docstring)."""
    return pool(widen(ins[0]), mode=p["mode"], kernel_shape=list(p["kernel_shape"]),
             strides=list(p["strides"]), pads=list(p["pads"]),
             dilations=list(p["dilations"]), ceil_mode=bool(p.get("ceil_mode")),
             count_include_pad=bool(p.get("count_include_pad")))


@math_op("reduce_rows")
def _reduce_rows(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """`op` over the last axis of [rows, length], keepdims."""
    # not widened: fp16 means accumulate in fp64 there, as in the whole-layer kernel
    return reduce(np.asarray(ins[0]), op=p["reduce"], axes=[1], keepdims=True)


@math_op("clip")
def _clip(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """min(max(x, lo), hi) with the absent bounds left out."""
    x = widen(ins[0])
    if p.get("lo") is not None:
        x = np.maximum(x, np.asarray(p["lo"], x.dtype))
    if p.get("hi") is not None:
        x = np.minimum(x, np.asarray(p["hi"], x.dtype))
    return x
