"""How a gather tiles, as a function of the graph and the memory plan: the row blocks of
a lookup by data indices (`lookup_tiling`) and of a gather with constant indices
(`const_gather_tiling`), or None when the layer runs whole (`gather_tiling` picks the one
`gather.lower_gather` lowers). The per-op lowering (`gather`) emits the tiles of these
blocks; the plan pass asks the same functions which layers make one tile (`lone_plan`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs
from kernbench.numerics.shape import gather, gather_elements, gather_nd

INDEX_TYPES = ("int32", "int64")

#: (first row, rows, cube or None) blocks of `Lowering.row_spans`
Spans = list[tuple[int, int, int | None]]


def _lookup_shape(lw: Lowering, n: LayerIR) -> tuple[int, int] | None:
    """(table rows, elements per row) of a gather whose indices are data, or None."""
    data = lw.g.tensors[n.inputs[1 if n.op_type == "EMBEDDING" else 0]].shape
    if not data:
        return None
    if n.op_type == "EMBEDDING" or (n.op_type == "GATHER"
                                    and int(node_attrs(n).axis) % len(data) == 0):
        return data[0], math.prod(data[1:])
    if n.op_type == "GATHER_ELEMENTS":
        ax = int(node_attrs(n).axis) % len(data)
        idx = lw.g.tensors[n.inputs[1]].shape
        if len(idx) == len(data) and all(d == 1 for i, d in enumerate(data) if i != ax) \
                and all(d == 1 for i, d in enumerate(idx) if i != ax):
            return data[ax], 1
    return None


class LookupTiling(NamedTuple):
    """A lookup's indices, table and output, table rows, elements a row and row blocks."""

    ids: Placement
    table: Placement
    y: Placement
    table_rows: int
    cols: int
    spans: Spans


def lookup_tiling(lw: Lowering, n: LayerIR) -> LookupTiling | None:
    """The row blocks of a lookup by data indices (None: not a lookup these tiles take):
    the output's rows over the PEs of the cube holding them, at most one bank a block."""
    ids_tid, tab_tid = ((n.inputs[0], n.inputs[1]) if n.op_type == "EMBEDDING"
                        else (n.inputs[1], n.inputs[0]))
    dims = _lookup_shape(lw, n)
    y = lw.plan.placements.get(n.outputs[0])
    if dims is None or y is None:
        return None
    x, t = lw.placement(ids_tid), lw.placement(tab_tid)
    if x.dtype not in INDEX_TYPES or not x.contiguous or not t.contiguous or t.parts \
            or not y.contiguous or y.dtype != t.dtype or ITEMSIZE[t.dtype] % 1:
        return None
    table_rows, cols = dims
    row_bytes = int(cols * ITEMSIZE[t.dtype])
    rows = math.prod(x.shape) if x.shape else 1
    if rows * cols != math.prod(y.shape) or row_bytes > lw.bank:
        return None
    max_rows = max(1, lw.bank // max(row_bytes, ITEMSIZE[x.dtype]))
    return LookupTiling(x, t, y, table_rows, cols, lw.row_spans(y, rows, cols, max_rows))


def source_map(n: LayerIR, shape: tuple[int, ...], idx: np.ndarray) -> np.ndarray:
    """The flat input element each output element of a constant-index gather copies."""
    src = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    if n.op_type == "GATHER":
        return gather(src, idx, axis=int(node_attrs(n).axis))
    if n.op_type == "GATHER_ELEMENTS":
        return gather_elements(src, idx, axis=int(node_attrs(n).axis))
    return gather_nd(src, idx, batch_dims=int(node_attrs(n).batch_dims))


def strided(sb: np.ndarray) -> int | None:
    """The row stride when every row of the block copies one contiguous run and the runs
    are evenly spaced without overlap (one 2-D DMA), else None."""
    r, c = sb.shape
    if not (sb == sb[:, :1] + np.arange(c)).all():
        return None
    if r == 1:
        return c
    st = np.diff(sb[:, 0])
    return int(st[0]) if (st == st[0]).all() and st[0] >= c else None


class ConstGatherTiling(NamedTuple):
    """A constant-index gather's input, output, the source of every output element
    (rows × cols) and the row blocks."""

    x: Placement
    y: Placement
    src: np.ndarray
    spans: Spans


def const_gather_tiling(lw: Lowering, n: LayerIR) -> ConstGatherTiling | None:
    """The row blocks of a gather with constant indices (None: it runs whole): at most one
    bank a block; over a spread input every block's sources must be evenly strided rows
    (runs and indexed gathers address one copy of the input)."""
    if len(n.inputs) < 2 or not lw.g.tensors[n.inputs[1]].const:
        return None
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or not x.contiguous or not y.contiguous or x.dtype != y.dtype \
            or ITEMSIZE[x.dtype] % 1 or not y.shape or not math.prod(y.shape):
        return None
    src = source_map(n, tuple(x.shape), np.asarray(lw.g.weights[n.inputs[1]]))
    if tuple(src.shape) != tuple(y.shape):
        return None
    isz = int(ITEMSIZE[x.dtype])
    cols = y.shape[-1]
    rows = math.prod(y.shape[:-1])
    if cols * isz > lw.bank:
        return None
    src = src.reshape(rows, cols)
    spans = lw.row_spans(y, rows, cols, lw.bank // (cols * isz))
    if x.parts and any(strided(src[r0:r0 + r]) is None for r0, r, _ in spans):
        return None
    return ConstGatherTiling(x, y, src, spans)


def gather_tiling(lw: Lowering, n: LayerIR) -> LookupTiling | ConstGatherTiling | None:
    """The tiling of an EMBEDDING / GATHER / GATHER_ND / GATHER_ELEMENTS: constant indices
    as a layout move, data indices as a lookup (None: it runs whole)."""
    if n.op_type != "EMBEDDING" and lw.g.tensors[n.inputs[1]].const:
        return const_gather_tiling(lw, n)
    return lookup_tiling(lw, n)


__all__ = ["INDEX_TYPES", "ConstGatherTiling", "LookupTiling", "const_gather_tiling",
           "gather_tiling", "lookup_tiling", "source_map", "strided"]
