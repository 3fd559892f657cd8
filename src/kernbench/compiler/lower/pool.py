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

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.window import MIN_BLOCK_ELEMS, Geom, choose, geom, halves
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: cycles charged per tile when comparing block sizes (DMA and command round trips)
TILE_OVERHEAD_CYCLES = 600
REDUCE_OPS = ("mean", "sum", "max", "min")


def _pool_blocks(lw: Lowering, geo: Geom, in_b: float, out_b: float) -> tuple[int, ...]:
    """(channels, output rows) of a pool tile."""
    lanes = lw.state.topology.config.cube.pe_template.pe_math.lanes

    def fits(cb: int, t: int) -> bool:
        rows = min(geo.h, (t - 1) * geo.strides[0] + (geo.kh - 1) * geo.dils[0] + 1)
        return max(cb * rows * geo.w * in_b, cb * t * geo.wo * out_b) <= lw.bank

    def cost(cb: int, t: int) -> float:
        return math.ceil(cb * t * geo.wo * geo.kh * geo.kw / lanes) + TILE_OVERHEAD_CYCLES

    def tiles(cb: int, t: int) -> int:
        return geo.n * math.ceil(geo.c / cb) * math.ceil(geo.ho / t)

    cands = [(cb, t) for cb in halves(geo.c) for t in halves(geo.ho)]
    return choose(cands, fits, cost, tiles, lw.n_pes)


def lower_pool(lw: Lowering, n: LayerIR) -> bool:
    """MaxPool / AveragePool as VE_POOL_TILE blocks (False: it runs whole)."""
    a = node_attrs(n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or a.mode not in ("max", "avg") or x.dtype not in ("fp32", "fp16") \
            or y.dtype != x.dtype or not x.contiguous or not y.contiguous \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    geo = geom(n, list(x.shape), list(y.shape), list(a.kernel_shape))
    if geo is None:
        return False
    isz = ITEMSIZE[x.dtype]
    cb_max, toh = _pool_blocks(lw, geo, isz, isz)
    blocks = [geo.rows_for(oh0, min(toh, geo.ho - oh0)) for oh0 in range(0, geo.ho, toh)]
    if any(rb.rows < 1 for rb in blocks):
        return False
    q = QBITS_OF[x.dtype]
    hw_in, hw_out = geo.h * geo.w, geo.ho * geo.wo
    for img in range(geo.n):
        for c0 in range(0, geo.c, cb_max):
            cb = min(cb_max, geo.c - c0)
            for oh0, rb in zip(range(0, geo.ho, toh), blocks, strict=True):
                t = min(toh, geo.ho - oh0)
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
    a = node_attrs(n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    rank = len(x.shape)
    axes = sorted(int(v) % rank for v in (a.axes or range(rank))) if rank else []
    if y is None or a.op not in REDUCE_OPS or not axes \
            or axes != list(range(rank - len(axes), rank)) or x.dtype not in ("fp32", "fp16") \
            or y.dtype not in ("fp32", "fp16") or not x.contiguous or not y.contiguous \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    rows = int(np.prod(x.shape[:axes[0]])) if axes[0] else 1
    length = int(np.prod(x.shape[axes[0]:]))
    if int(np.prod(y.shape)) != rows or length * 4 > lw.bank:
        return False
    per = max(1, min(rows, lw.bank // (length * 4),
                     max(math.ceil(MIN_BLOCK_ELEMS / length), math.ceil(rows / lw.n_pes))))
    isz, osz = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype]
    for r0 in range(0, rows, per):
        r = min(per, rows - r0)
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
