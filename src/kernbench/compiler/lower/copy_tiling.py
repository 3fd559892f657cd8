"""How a copy layer (TRANSPOSE, SLICE, SPLIT, CONCAT) is tiled, told from the graph and
the memory plan (`copy_pairs`; the plan pass asks whether a layer runs whole, `copy`
emits the tiles).

A copy is a list of (source, destination) strided views (`View`) of HBM; it is tiled when
its dtype has a DMA width (`layout.copyable`), every output it writes is placed and every
pair, its contiguous neighbour axes merged (`merged`), has a unit innermost destination
stride and a unit source stride on some axis. Reading a placement may place a constant;
nothing else is allocated.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.layout import copyable
from kernbench.compiler.lower.blocks import MIN_TILE_BYTES
from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


class View(NamedTuple):
    """Elements of placement `p` at `off + Σ index[i]·strides[i]` (element units)."""

    p: Placement
    off: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def view_of(p: Placement) -> View:
    return View(p, 0, tuple(p.shape), tuple(p.strides))


def sub_view(v: View, axis: int, start: int, size: int, step: int = 1) -> View:
    """`v` restricted to `size` indices of `axis` from `start`, `step` apart."""
    shape = list(v.shape)
    strides = list(v.strides)
    shape[axis] = size
    off = v.off + start * v.strides[axis]
    strides[axis] = v.strides[axis] * step
    return View(v.p, off, tuple(shape), tuple(strides))


def merged(shape: tuple[int, ...], a: tuple[int, ...],
            b: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """Drop size-1 axes and merge neighbours contiguous in both views ([0] when empty;
    one element has stride 1 on both sides)."""
    if 0 in shape:
        return [0], [1], [1]
    axes = [i for i, d in enumerate(shape) if d > 1]
    if not axes:
        return [1], [1], [1]
    sh = [shape[i] for i in axes]
    sa = [a[i] for i in axes]
    sb = [b[i] for i in axes]
    i = len(sh) - 2
    while i >= 0:
        if sa[i] == sa[i + 1] * sh[i + 1] and sb[i] == sb[i + 1] * sh[i + 1]:
            sh[i] *= sh[i + 1]
            sa[i], sb[i] = sa[i + 1], sb[i + 1]
            del sh[i + 1], sa[i + 1], sb[i + 1]
        i -= 1
    return sh, sa, sb


def _views(lw: Lowering, n: LayerIR) -> list[tuple[View, View]] | None:
    """(source view, destination view) pairs of a copy layer; None if one is unplaced."""
    a = node_attrs(n)
    ins = [lw.placement(t) for t in n.inputs[:1]]
    outs = [lw.plan.placements.get(t) if t else None for t in n.outputs]
    if n.op_type == "CONCAT":
        y = outs[0]
        if y is None:
            return None
        axis = int(a.axis) % len(y.shape)
        pairs, o = [], 0
        for t in n.inputs:
            if not t:
                continue
            x = lw.placement(t)
            pairs.append((view_of(x), sub_view(view_of(y), axis, o, x.shape[axis])))
            o += x.shape[axis]
        return pairs
    x = view_of(ins[0])
    if n.op_type == "TRANSPOSE":
        perm = [int(p) for p in a.perm]
        y = outs[0]
        if y is None:
            return None
        return [(View(x.p, 0, tuple(y.shape), tuple(x.strides[p] for p in perm)), view_of(y))]
    if n.op_type == "SLICE":
        y = outs[0]
        if y is None:
            return None
        v = x
        for ax, (s, st) in enumerate(zip(a.starts, a.steps, strict=True)):
            s = int(s) + (x.shape[ax] if int(s) < 0 else 0)
            v = sub_view(v, ax, s, y.shape[ax], int(st))
        return [(v, view_of(y))]
    axis = int(a.axis) % len(x.shape)  # SPLIT
    pairs, o = [], 0
    for t, y in zip(n.outputs, outs, strict=True):
        size = lw.g.tensors[t].shape[axis] if t else 0
        if y is not None:
            pairs.append((sub_view(x, axis, o, size), view_of(y)))
        o += size
    return pairs


def _tileable(src: View, dst: View) -> bool:
    """Can `copy.copy_view` tile this pair (checked before any op is emitted)?"""
    sh, ss, ds = merged(src.shape, src.strides, dst.strides)
    return int(np.prod(sh)) == 0 or ds[-1] == 1 and (ss[-1] == 1 or 1 in ss)


def copy_pairs(lw: Lowering, n: LayerIR) -> list[tuple[View, View]] | None:
    """The (source, destination) views copy layer `n`'s tiles copy, or None when it runs
    whole (module doc)."""
    if not copyable(lw.g, n):
        return None
    pairs = _views(lw, n)
    if pairs is None or any(not _tileable(src, dst) for src, dst in pairs):
        return None
    return pairs


def _per(lw: Lowering, rows: int, row_bytes: int, outer: int) -> int:
    """Rows per tile: within a bank, at least MIN_TILE_BYTES, enough tiles for the PEs."""
    fit = max(1, lw.bank // max(1, row_bytes))
    want = math.ceil(outer * rows / lw.n_pes)  # rows per tile for one tile per PE
    least = math.ceil(MIN_TILE_BYTES / max(1, row_bytes))
    return max(1, min(rows, fit, max(want, least)))


#: one block of a copy: (source element, destination element of the outer index, first
#: element or column along the inner axis, its count, first row, rows)
CopyTile = tuple[int, int, int, int, int, int]


def plain_tiles(lw: Lowering, src: View, dst: View, sh: list[int], ss: list[int],
                ds: list[int], isz: int) -> list[CopyTile]:
    """The blocks of a copy whose innermost runs are contiguous on both sides: per outer
    index, chunks of a run longer than a bank, blocks of rows (`_per`). Each draws a PE
    (`copy`); the plan pass counts them."""
    inner = sh[-1]
    chunk = min(inner, max(1, lw.bank // isz))  # a run longer than a bank: chunks
    rows = sh[-2] if len(sh) > 1 else 1
    outer_shape = tuple(sh[:-2])
    outer = int(np.prod(outer_shape)) if outer_shape else 1
    per = _per(lw, rows, chunk * isz, outer * math.ceil(inner / chunk))
    out = []
    for idx in np.ndindex(*outer_shape):
        so = src.off + sum(i * s for i, s in zip(idx, ss, strict=False))
        do = dst.off + sum(i * s for i, s in zip(idx, ds, strict=False))
        out += [(so, do, e0, min(chunk, inner - e0), r0, min(per, rows - r0))
                for e0 in range(0, inner, chunk) for r0 in range(0, rows, per)]
    return out


def transposing_tiles(lw: Lowering, src: View, dst: View, sh: list[int], ss: list[int],
                      ds: list[int], isz: int, q: int) -> list[CopyTile]:
    """The (rows along the last axis × cols along `q`, the source's contiguous axis)
    blocks of a copy that moves the innermost axis, per index of the other axes."""
    last = len(sh) - 1
    n_r, n_c = sh[last], sh[q]
    cols = min(n_c, max(1, lw.bank // (isz * min(n_r, 64))))
    others = [i for i in range(len(sh)) if i not in (q, last)]
    outer = int(np.prod([sh[i] for i in others])) if others else 1
    per = _per(lw, n_r, cols * isz, outer * math.ceil(n_c / cols))
    out = []
    for idx in np.ndindex(*[sh[i] for i in others]):
        so = src.off + sum(i * ss[a] for i, a in zip(idx, others, strict=True))
        do = dst.off + sum(i * ds[a] for i, a in zip(idx, others, strict=True))
        out += [(so, do, c0, min(cols, n_c - c0), r0, min(per, n_r - r0))
                for c0 in range(0, n_c, cols) for r0 in range(0, n_r, per)]
    return out


def copy_draws(lw: Lowering, n: LayerIR) -> int | None:
    """The blocks a copy layer's tiles make, one PE drawn each (None: it runs whole)."""
    pairs = copy_pairs(lw, n)
    if pairs is None:
        return None
    drawn = 0
    for src, dst in pairs:
        isz = int(ITEMSIZE[src.p.dtype])
        sh, ss, ds = merged(src.shape, src.strides, dst.strides)
        if int(np.prod(sh)) == 0:
            continue
        drawn += len(plain_tiles(lw, src, dst, sh, ss, ds, isz) if ss[-1] == 1
                     else transposing_tiles(lw, src, dst, sh, ss, ds, isz, ss.index(1)))
    return drawn


__all__ = ["CopyTile", "View", "copy_draws", "copy_pairs", "merged", "plain_tiles", "sub_view",
           "transposing_tiles", "view_of"]
