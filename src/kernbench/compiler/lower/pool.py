"""POOL (MaxPool / AveragePool, 1-D and 2-D) and REDUCE over trailing axes (the global
pools, ReduceMean over H·W) as vector tiles on every PE.

POOL: a tile is a block of channels × a block of output rows (full width) of one image:
DMA the input rows it needs (its halo; `window.Geom.rows_for`), one VE_POOL_TILE (the
layer's window, strides, dilations, count_include_pad and ceil_mode; the block's own
top / bottom padding), DMA the block out. Its cost is outputs × window taps lane
operations, so a 3×3 pool costs nine times a 1×1 one.
REDUCE (mean, sum, max, min) whose axes are the trailing axes of a contiguous tensor is
a row reduction: rows = the leading elements, length = the reduced ones; row blocks go
over the PEs as VE_REDUCE_TILE. Other layers return False and run whole.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.pool_tiling import (
    pool_tiling,
    pool_units,
    reduce_blocks,
    reduce_tiling,
)
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


def lower_pool(lw: Lowering, n: LayerIR) -> bool:
    """MaxPool / AveragePool as VE_POOL_TILE blocks (False: it runs whole)."""
    pt = pool_tiling(lw, n)
    if pt is None:
        return False
    a = node_attrs(n)
    x, y, geo = pt.x, pt.y, pt.geo
    isz = ITEMSIZE[x.dtype]
    q = QBITS_OF[x.dtype]
    hw_in, hw_out = geo.h * geo.w, geo.ho * geo.wo
    for img, c0, cb, oh0, t, rb in pool_units(pt):
        pe = lw.next_pe()
        bi = lw.buf(pe, cb * rb.rows * geo.w * isz, f"{n.id}.in")
        bo = lw.buf(pe, cb * t * geo.wo * isz, f"{n.id}.out")
        lw.dma(False, pe, bi, x, (img * geo.c + c0) * hw_in + rb.first * geo.w, cb,
               rb.rows * geo.w, hw_in, n.id)
        fields = {"c": cb, **geo.window_fields(rb), "mode": a.mode,
                  "count_include_pad": bool(a.count_include_pad),
                  "ceil_mode": bool(a.ceil_mode),
                  "qbits_activation": q, "out_qbits": q}
        lw.op("VE_POOL_TILE", pe, n.id, fields, reads=[("in", bi)],
              writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, (img * geo.c + c0) * hw_out + oh0 * geo.wo, cb,
               t * geo.wo, hw_out, n.id, frees=[bo])
    return True


def lower_reduce(lw: Lowering, n: LayerIR) -> bool:
    """REDUCE over trailing axes as VE_REDUCE_TILE row blocks (False: it runs whole)."""
    rt = reduce_tiling(lw, n)
    if rt is None:
        return False
    a = node_attrs(n)
    x, y, _, length = rt
    isz, osz = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype]
    for r0, r in reduce_blocks(lw, rt):
        pe = lw.next_pe()
        bi = lw.buf(pe, r * length * isz, f"{n.id}.in")
        bo = lw.buf(pe, r * osz, f"{n.id}.out")
        lw.dma(False, pe, bi, x, r0 * length, 1, r * length, r * length, n.id)
        lw.op("VE_REDUCE_TILE", pe, n.id,
              {"length": length, "rows": r, "op": a.op, "qbits_activation": QBITS_OF[x.dtype],
               "out_qbits": QBITS_OF[y.dtype]},
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, r0, 1, r, r, n.id, frees=[bo])
    return True
