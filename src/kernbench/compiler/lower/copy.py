"""Data movement as strided DMA copies tiled over the PEs: TRANSPOSE, SLICE, SPLIT, CONCAT.

Every one of these is a copy between two *strided views* of HBM (`View`: a placement, a
first element and per-axis element strides of the same logical shape): a transpose reads
its source through permuted strides, a slice through an offset and stepped strides, a
split output is a slice of the input, a concat input lands in a slice of the output. A
copy is cut into tiles; each tile is one strided DMA load into a TCM buffer and one
strided DMA store out of it (`copy_view`):

- when the innermost axis is contiguous on both sides, a tile is a block of rows (the
  second innermost axis, its own stride on each side) of whole innermost runs: no compute
  op, the layout change is done by the two DMAs' strides;
- when the transpose moves the innermost axis (ViT / Whisper's (0, 2, 1), K transposed
  for Q·Kᵀ), a tile loads a (rows × cols) block whose rows are the source's contiguous
  runs, transposes it in TCM with VE_TRANSPOSE_TILE, and stores the transposed block as
  contiguous runs of the destination.

Tiles go to the PE near the destination (the cube holding those rows of a spread
storage), at least `MIN_TILE_BYTES` each and at least one per PE when the tensor is large
enough. Adjacent axes that are contiguous on both sides are merged first, so a copy of
contiguous data is a few long runs. A layer whose dtype has no DMA width, or whose views
have no contiguous axis, returns False (and runs whole).
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.copy_tiling import (
    View,
    copy_pairs,
    merged,
    plain_tiles,
    transposing_tiles,
)
from kernbench.ir.model import LayerIR


def copy_view(lw: Lowering, layer: str, src: View, dst: View) -> bool:
    """Tiles copying `src` into `dst` (same shape and dtype); False if no tiling applies."""
    isz = int(ITEMSIZE[src.p.dtype])
    sh, ss, ds = merged(src.shape, src.strides, dst.strides)
    if int(np.prod(sh)) == 0:
        return True
    if ds[-1] != 1:
        return False
    if ss[-1] == 1:
        _plain(lw, layer, src, dst, sh, ss, ds, isz)
        return True
    if 1 not in ss:
        return False
    _transposing(lw, layer, src, dst, sh, ss, ds, isz, ss.index(1))
    return True


def _plain(lw: Lowering, layer: str, src: View, dst: View, sh: list[int], ss: list[int],
           ds: list[int], isz: int) -> None:
    """Innermost runs contiguous on both sides: blocks of rows, DMA in, DMA out."""
    sr, dr = (ss[-2], ds[-2]) if len(sh) > 1 else (0, 0)
    for so, do, e0, e, r0, r in plain_tiles(lw, src, dst, sh, ss, ds, isz):
        d0 = do + r0 * dr + e0
        pe = lw.pe_near(dst.p, d0)
        b = lw.buf(pe, r * e * isz, f"{layer}.copy")
        lw.dma(False, pe, b, src.p, so + r0 * sr + e0, r, e, sr or e, layer)
        lw.dma(True, pe, b, dst.p, d0, r, e, dr or e, layer, frees=[b])


def _transposing(lw: Lowering, layer: str, src: View, dst: View, sh: list[int],
                 ss: list[int], ds: list[int], isz: int, q: int) -> None:
    """The destination's innermost axis is strided in the source, whose contiguous axis is
    `q`: (rows along the last axis × cols along q) blocks, VE_TRANSPOSE_TILE in TCM."""
    last = len(sh) - 1
    qb = QBITS_OF[src.p.dtype]
    for so, do, c0, c, r0, r in transposing_tiles(lw, src, dst, sh, ss, ds, isz, q):
        d0 = do + c0 * ds[q] + r0
        pe = lw.pe_near(dst.p, d0)
        bi = lw.buf(pe, r * c * isz, f"{layer}.in")
        lw.dma(False, pe, bi, src.p, so + r0 * ss[last] + c0 * ss[q], r, c,
               ss[last], layer)
        bo = lw.buf(pe, r * c * isz, f"{layer}.out")
        lw.op("VE_TRANSPOSE_TILE", pe, layer,
              {"rows": r, "cols": c, "qbits_activation": qb, **lw.engines.ve(pe)},
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, dst.p, d0, c, r, ds[q], layer, frees=[bo])


def lower_copy(lw: Lowering, n: LayerIR) -> bool:
    """TRANSPOSE / SLICE / SPLIT / CONCAT as tiled strided copies (False: runs whole)."""
    pairs = copy_pairs(lw, n)
    if pairs is None:
        return False
    for src, dst in pairs:
        copy_view(lw, n.id, src, dst)
    return True
