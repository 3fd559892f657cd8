"""Gathers as DMA tiles: no vector math, only data movement.

- Indices that are data (EMBEDDING; GATHER along axis 0; a GATHER_ELEMENTS that is a 1-D
  lookup): the output's rows (one per index) are cut into blocks over the PEs of the cube
  holding them (`Lowering.row_blocks`, so a spread output is written where it lives). Per
  block: DMA the block's indices into TCM, one DMA_GATHER_TILE fetches their table rows
  from the table's copy in that cube, DMA the rows out.
- Constant indices (GATHER, GATHER_ND, GATHER_ELEMENTS whose indices are weights): the
  compiler knows which input element every output element copies (`source_map`), so the
  layer is a layout move. Per block of output rows: one (strided) DMA when the block's
  sources are evenly strided rows, else one DMA per contiguous run (up to `MAX_RUNS`), else
  a DMA_GATHER_TILE of single elements with the block's source offsets as a constant
  index table; then the block is stored.
A layer whose tensors are strided, packed (int4) or whose table is spread over cubes
returns False and runs whole.
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.blocks import one_tile_spread
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.values import HbmRange
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs
from kernbench.numerics.shape import gather, gather_elements, gather_nd

#: contiguous runs per block that still pay as separate DMAs (more: an indexed gather)
MAX_RUNS = 8
INDEX_TYPES = ("int32", "int64")


def _whole(p: Placement) -> HbmRange:
    nb = int(math.ceil(math.prod(p.shape) * ITEMSIZE[p.dtype]))
    return (p.key, p.addr, p.addr + nb, nb, nb)


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


def lower_lookup(lw: Lowering, n: LayerIR) -> bool:
    """Rows of a table picked by data indices, as DMA_GATHER_TILE blocks (False: not a
    lookup these tiles take)."""
    ids_tid, tab_tid = ((n.inputs[0], n.inputs[1]) if n.op_type == "EMBEDDING"
                        else (n.inputs[1], n.inputs[0]))
    dims = _lookup_shape(lw, n)
    y = lw.plan.placements.get(n.outputs[0])
    if dims is None or y is None:
        return False
    x, t = lw.placement(ids_tid), lw.placement(tab_tid)
    if x.dtype not in INDEX_TYPES or not x.contiguous or not t.contiguous or t.parts \
            or not y.contiguous or y.dtype != t.dtype or ITEMSIZE[t.dtype] % 1:
        return False
    table_rows, cols = dims
    row_bytes = int(cols * ITEMSIZE[t.dtype])
    rows = math.prod(x.shape) if x.shape else 1
    if rows * cols != math.prod(y.shape) or row_bytes > lw.bank:
        return False
    max_rows = max(1, lw.bank // max(row_bytes, ITEMSIZE[x.dtype]))
    role = "weight" if lw.g.tensors[tab_tid].const else "activation"
    for r0, r, pe in one_tile_spread(lw, lw.row_blocks(y, rows, cols, max_rows)):
        bi = lw.buf(pe, r * ITEMSIZE[x.dtype], f"{n.id}.ids")
        lw.dma(False, pe, bi, x, r0, 1, r, r, n.id)
        bo = lw.buf(pe, r * row_bytes, f"{n.id}.rows")
        lw.op("DMA_GATHER_TILE", pe, n.id,
              {"tensor_role": role, "dram_addr": t.addr_in(lw.cube(pe)),
               "table_rows": table_rows, "row_bytes": row_bytes, "rows": r,
               "index_dtype": x.dtype},
              reads=[("ids", bi)], writes=[("spm", bo)], hbm_reads=[_whole(t)], frees=[bi])
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True


def source_map(n: LayerIR, shape: tuple[int, ...], idx: np.ndarray) -> np.ndarray:
    """The flat input element each output element of a constant-index gather copies."""
    src = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    if n.op_type == "GATHER":
        return gather(src, idx, axis=int(node_attrs(n).axis))
    if n.op_type == "GATHER_ELEMENTS":
        return gather_elements(src, idx, axis=int(node_attrs(n).axis))
    return gather_nd(src, idx, batch_dims=int(node_attrs(n).batch_dims))


def _runs(flat: np.ndarray) -> list[tuple[int, int, int]]:
    """(first output element, first source element, length) of each contiguous run."""
    cut = np.flatnonzero(np.diff(flat) != 1) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [flat.size]])
    return [(int(s), int(flat[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def _strided(sb: np.ndarray) -> int | None:
    """The row stride when every row of the block copies one contiguous run and the runs
    are evenly spaced without overlap (one 2-D DMA), else None."""
    r, c = sb.shape
    if not (sb == sb[:, :1] + np.arange(c)).all():
        return None
    if r == 1:
        return c
    st = np.diff(sb[:, 0])
    return int(st[0]) if (st == st[0]).all() and st[0] >= c else None


def lower_const_gather(lw: Lowering, n: LayerIR) -> bool:
    """A gather with constant indices as DMAs (see the module docstring; False: it runs
    whole)."""
    if len(n.inputs) < 2 or not lw.g.tensors[n.inputs[1]].const:
        return False
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or not x.contiguous or not y.contiguous or x.dtype != y.dtype \
            or ITEMSIZE[x.dtype] % 1 or not y.shape or not math.prod(y.shape):
        return False
    src = source_map(n, tuple(x.shape), np.asarray(lw.g.weights[n.inputs[1]]))
    if tuple(src.shape) != tuple(y.shape):
        return False
    isz = int(ITEMSIZE[x.dtype])
    cols = y.shape[-1]
    rows = math.prod(y.shape[:-1])
    if cols * isz > lw.bank:
        return False
    src = src.reshape(rows, cols)
    blocks = one_tile_spread(lw, lw.row_blocks(y, rows, cols, lw.bank // (cols * isz)))
    if x.parts and any(_strided(src[r0:r0 + r]) is None for r0, r, _ in blocks):
        return False  # runs and indexed gathers address one copy of the input
    for r0, r, pe in blocks:
        bo = lw.buf(pe, r * cols * isz, f"{n.id}.out")
        _load_block(lw, n, x, src[r0:r0 + r], pe, bo, r0)
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True


def _load_block(lw: Lowering, n: LayerIR, x: Placement, sb: np.ndarray, pe: int, bo: Buf,
                r0: int) -> None:
    """DMA the sources `sb` of the output block at row `r0` into `bo`."""
    r, c = sb.shape
    isz = int(ITEMSIZE[x.dtype])
    st = _strided(sb)
    if st is not None:
        lw.dma(False, pe, bo, x, int(sb[0, 0]), r, c, st, n.id)
        return
    runs = _runs(sb.reshape(-1))
    if len(runs) <= MAX_RUNS:
        for o0, s0, ln in runs:
            op = lw.dma(False, pe, bo, x, s0, 1, ln, ln, n.id)
            op.buf_offset = o0 * isz
        return
    idx = lw.const(f"{n.id}.src{r0}", sb.reshape(-1).astype(np.int32), "int32")
    bi = lw.buf(pe, sb.size * 4, f"{n.id}.src")
    lw.dma(False, pe, bi, idx, 0, 1, sb.size, sb.size, n.id, role="weight")
    lw.op("DMA_GATHER_TILE", pe, n.id,
          {"tensor_role": "activation", "dram_addr": x.addr_in(lw.cube(pe)),
           "table_rows": math.prod(x.shape), "row_bytes": isz, "rows": sb.size,
           "index_dtype": "int32"},
          reads=[("ids", bi)], writes=[("spm", bo)], hbm_reads=[_whole(x)], frees=[bi])


def lower_gather(lw: Lowering, n: LayerIR) -> bool:
    """EMBEDDING / GATHER / GATHER_ND / GATHER_ELEMENTS: constant indices as layout moves,
    data indices as row lookups."""
    if n.op_type != "EMBEDDING" and lw.g.tensors[n.inputs[1]].const:
        return lower_const_gather(lw, n)
    return lower_lookup(lw, n)
