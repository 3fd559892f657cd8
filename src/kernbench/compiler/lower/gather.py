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
The blocks, and whether the layer runs whole (strided or packed (int4) tensors, a table
spread over cubes), are `gather_tiling`'s, a function of the graph and the memory plan that
the plan pass asks too; a layer of one block runs on the PE the lowering plan gives it
(`lone`).
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.blocks import one_tile_spread
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gather_tiling import (
    ConstGatherTiling,
    LookupTiling,
    gather_tiling,
    strided,
)
from kernbench.compiler.lower.values import HbmRange
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR

#: contiguous runs per block that still pay as separate DMAs (more: an indexed gather)
MAX_RUNS = 8


def _whole(p: Placement) -> HbmRange:
    nb = int(math.ceil(math.prod(p.shape) * ITEMSIZE[p.dtype]))
    return (p.key, p.addr, p.addr + nb, nb, nb)


def lower_lookup(lw: Lowering, n: LayerIR, tl: LookupTiling) -> None:
    """Rows of a table picked by data indices, as DMA_GATHER_TILE blocks."""
    x, t, y, table_rows, cols = tl.ids, tl.table, tl.y, tl.table_rows, tl.cols
    row_bytes = int(cols * ITEMSIZE[t.dtype])
    tab_tid = n.inputs[1] if n.op_type == "EMBEDDING" else n.inputs[0]
    role = "weight" if lw.g.tensors[tab_tid].const else "activation"
    for r0, r, pe in one_tile_spread(lw, n.id, lw.spans_on_pes(tl.spans)):
        bi = lw.buf(pe, r * ITEMSIZE[x.dtype], f"{n.id}.ids")
        lw.dma(False, pe, bi, x, r0, 1, r, r, n.id)
        bo = lw.buf(pe, r * row_bytes, f"{n.id}.rows")
        lw.op("DMA_GATHER_TILE", pe, n.id,
              {"tensor_role": role, "dram_addr": t.addr_in(lw.cube(pe)),
               "table_rows": table_rows, "row_bytes": row_bytes, "rows": r,
               "index_dtype": x.dtype},
              reads=[("ids", bi)], writes=[("spm", bo)], hbm_reads=[_whole(t)], frees=[bi])
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])


def _runs(flat: np.ndarray) -> list[tuple[int, int, int]]:
    """(first output element, first source element, length) of each contiguous run."""
    cut = np.flatnonzero(np.diff(flat) != 1) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [flat.size]])
    return [(int(s), int(flat[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def lower_const_gather(lw: Lowering, n: LayerIR, tl: ConstGatherTiling) -> None:
    """A gather with constant indices as DMAs (see the module docstring)."""
    x, y, src = tl.x, tl.y, tl.src
    isz = int(ITEMSIZE[x.dtype])
    cols = y.shape[-1]
    for r0, r, pe in one_tile_spread(lw, n.id, lw.spans_on_pes(tl.spans)):
        bo = lw.buf(pe, r * cols * isz, f"{n.id}.out")
        _load_block(lw, n, x, src[r0:r0 + r], pe, bo, r0)
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])


def _load_block(lw: Lowering, n: LayerIR, x: Placement, sb: np.ndarray, pe: int, bo: Buf,
                r0: int) -> None:
    """DMA the sources `sb` of the output block at row `r0` into `bo`."""
    r, c = sb.shape
    isz = int(ITEMSIZE[x.dtype])
    st = strided(sb)
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
    data indices as row lookups (`gather_tiling`; False: the layer runs whole)."""
    tl = gather_tiling(lw, n)
    if isinstance(tl, LookupTiling):
        lower_lookup(lw, n, tl)
    elif isinstance(tl, ConstGatherTiling):
        lower_const_gather(lw, n, tl)
    return tl is not None
