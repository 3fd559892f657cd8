"""KV_UPDATE: present[b, h] = concat(past[b, h], new[b, h]) along the sequence.

Per (batch, head) and per block of rows (at most one TCM bank, small enough that every PE
gets a block, `_block_rows`): DMA the past or new rows
in, convert them when the cache is stored at other bits (VE_QUANTIZE with the calibrated
scale for int16 / int8 / int4, VE_COPY for fp16), DMA them into their rows of the present cache
(a 4-bit cache is packed two values a byte: its DMAs move the packed bytes). Caches the
tiles cannot write (another axis, non-contiguous, odd rows of a 4-bit cache) run as a
layer op.
"""

from __future__ import annotations

import math

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.ir.model import LayerIR


def _tileable(lw: Lowering, n: LayerIR, past: Placement, new: Placement,
              out: Placement) -> bool:
    t_out = lw.g.tensors[n.outputs[0]]
    if t_out.quant is not None and out.dtype == "fp32":
        return False  # fake-quantized at other than 8 bits: the layer runs whole
    if n.attributes.get("axis", 2) != 2 or len(out.shape) != 4 or not out.contiguous \
            or not past.contiguous or new.strides[3] != 1:
        return False
    if out.dtype == "int4" and out.shape[3] % 2:
        return False  # rows of a packed 4-bit cache must start on a byte
    # a cache stored at other bits is int16 / int8 / int4 or fp16 from fp32
    return out.dtype == past.dtype or past.dtype == "fp32" and out.dtype in (
        "int16", "int8", "int4", "fp16")


#: a KV_UPDATE block has at least this many rows (when the cache has them): smaller
#: blocks pay a DMA latency and a command round trip each for little data
MIN_BLOCK_ROWS = 64


def _block_rows(lw: Lowering, rows: int, d: int, isz: float, total_rows: int) -> int:
    """Rows per block: at most a TCM bank, and few enough that the layer's `total_rows`
    (every head's) give each PE a block, but no fewer than MIN_BLOCK_ROWS."""
    spread = max(MIN_BLOCK_ROWS, math.ceil(total_rows / lw.n_pes))
    return max(1, min(rows, int(lw.bank // (d * isz)), spread))


def _copy_rows(lw: Lowering, n: LayerIR, src: Placement, out: Placement, b: int, h: int,
               rows: int, dst_row: int, d: int, isz: float, scale: float | None,
               per: int) -> None:
    """Rows [0, rows) of src[b, h] (d wide) into rows [dst_row, dst_row + rows) of
    out[b, h], `per` rows a block. A block runs in the cube holding its rows of a spread
    cache (the store is local; the past rows are read from that cube's copy)."""
    for r0 in range(0, rows, per):
        r = min(per, rows - r0)
        o = b * out.strides[0] + h * out.strides[1] + (dst_row + r0) * d
        pe = lw.pe_near(out, o) if out.parts else lw.next_pe()
        bb = lw.buf(pe, r * d * isz, f"{n.id}.rows")
        off = b * src.strides[0] + h * src.strides[1] + r0 * src.strides[2]
        lw.dma(False, pe, bb, src, off, r, d, src.strides[2], n.id, role="kv")
        if src.dtype != out.dtype and out.dtype == "fp16":
            bq = lw.buf(pe, r * d * 2, f"{n.id}.rows16")
            lw.op("VE_COPY_TILE", pe, n.id,
                  {"length": d, "rows": r, "qbits_activation": 32, "out_qbits": 16},
                  reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
            bb = bq
        elif src.dtype != out.dtype:
            bits = QBITS_OF[out.dtype]
            bq = lw.buf(pe, r * d * bits / 8, f"{n.id}.rowsq")
            lw.op("VE_QUANTIZE_TILE", pe, n.id,
                  {"length": d, "rows": r, "qbits_activation": 32, "out_qbits": bits,
                   "scale": scale, "zero_point": 0},
                  reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
            bb = bq
        lw.dma(True, pe, bb, out, o, r, d, d, n.id, role="kv", frees=[bb])


def lower_kv_update(lw: Lowering, n: LayerIR) -> bool:
    """The present cache from past and new rows; a cache stored at KV bits is quantized on
    the way (VE_QUANTIZE with its calibrated scale)."""
    past = lw.placement(n.inputs[0])
    new = lw.placement(n.inputs[1])
    out = lw.plan.placements[n.outputs[0]]
    if not _tileable(lw, n, past, new, out):
        return False
    scale = lw.plan.scales.get(out.key)
    b_, h_, p_len, d = past.shape
    s_len = new.shape[2]
    isz = max(ITEMSIZE[past.dtype], ITEMSIZE[new.dtype])
    in_place = n.attributes.get("in_place")
    per = _block_rows(lw, p_len, d, isz, b_ * h_ * (s_len if in_place else p_len))
    per_new = _block_rows(lw, s_len, d, isz, b_ * h_ * s_len)
    for b in range(b_):
        for h in range(h_):
            # in place (a paged / ring cache): only the new rows are written
            srcs = ((new, s_len, p_len, per_new),) if in_place else (
                (past, p_len, 0, per), (new, s_len, p_len, per_new))
            for src, rows, dst_row, blk in srcs:
                _copy_rows(lw, n, src, out, b, h, rows, dst_row, d, isz, scale, blk)
    return True
