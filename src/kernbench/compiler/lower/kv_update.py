"""KV_UPDATE: present[b, h] = concat(past[b, h], new[b, h]) along the sequence.

The past rows of every head, taken as one contiguous run, in even blocks (at most one TCM
bank, small enough that every PE gets a block, `_block_rows`), and the new rows per
(batch, head): DMA them in, convert them when the cache is stored at other bits
(VE_QUANTIZE with the calibrated scale for int16 / int8 / int4, VE_COPY for fp16), DMA
them into their rows of the present cache (a 4-bit cache is packed two values a byte: its
DMAs move the packed bytes). Caches the tiles cannot write (another axis, non-contiguous,
odd rows of a 4-bit cache) run as a layer op.
"""

from __future__ import annotations

import math
from itertools import groupby

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.tilegraph import Buf
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


def _convert(lw: Lowering, n: LayerIR, pe: int, bb: Buf, src_dtype: str, out_dtype: str,
             rows: int, d: int, scale: float | None) -> Buf:
    """The rows in `bb` at the cache's bits: VE_COPY to fp16, VE_QUANTIZE with the
    calibrated scale to int16 / int8 / int4, or `bb` itself when the bits are the same."""
    if src_dtype == out_dtype:
        return bb
    if out_dtype == "fp16":
        bq = lw.buf(pe, rows * d * 2, f"{n.id}.rows16")
        lw.op("VE_COPY_TILE", pe, n.id,
              {"length": d, "rows": rows, "qbits_activation": 32, "out_qbits": 16},
              reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
        return bq
    bits = QBITS_OF[out_dtype]
    bq = lw.buf(pe, rows * d * bits / 8, f"{n.id}.rowsq")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": d, "rows": rows, "qbits_activation": 32, "out_qbits": bits,
           "scale": scale, "zero_point": 0},
          reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
    return bq


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
        bb = _convert(lw, n, pe, bb, src.dtype, out.dtype, r, d, scale)
        lw.dma(True, pe, bb, out, o, r, d, d, n.id, role="kv", frees=[bb])


def _copy_past(lw: Lowering, n: LayerIR, past: Placement, out: Placement, d: int,
               isz: float, scale: float | None) -> None:
    """Every head's past rows into the first rows of its present rows. The past is
    contiguous, so the heads whose present rows live in one cube form one run of rows,
    cut into even blocks: one load per block, and a store per head the block covers.
    Even blocks, not blocks per head, so that the PEs copy the same bytes (heads of 1024
    rows in blocks of 192 left some PEs two blocks and others one of 64 rows)."""
    b_, h_, p_len, _ = past.shape
    total = b_ * h_ * p_len
    per = _block_rows(lw, total, d, isz, total)
    # runs of consecutive heads whose present rows start in the same cube
    for _, run in groupby(range(b_ * h_),
                          key=lambda bh: lw.cube_near(out, _present_row(out, h_, bh, 0, d))):
        bhs = list(run)
        lo, hi = bhs[0] * p_len, (bhs[-1] + 1) * p_len
        size = math.ceil((hi - lo) / math.ceil((hi - lo) / per))  # even blocks
        for f0 in range(lo, hi, size):
            _copy_block(lw, n, past, out, f0, min(hi, f0 + size), h_, p_len, d, isz, scale)


def _present_row(out: Placement, h_: int, bh: int, row: int, d: int) -> int:
    """Element offset of row `row` of head `bh` (batch · heads + head) in the present."""
    b, h = divmod(bh, h_)
    return b * out.strides[0] + h * out.strides[1] + row * d


def _copy_block(lw: Lowering, n: LayerIR, past: Placement, out: Placement, f0: int, f1: int,
                h_: int, p_len: int, d: int, isz: float, scale: float | None) -> None:
    """Past rows [f0, f1) of the (batch · head · row) run: one load, one conversion, a
    store per head."""
    segs = []  # (first run row, end, present element offset) per head
    f = f0
    while f < f1:
        bh, row = divmod(f, p_len)
        end = min(f1, f + p_len - row)
        segs.append((f, end, _present_row(out, h_, bh, row, d)))
        f = end
    pe = lw.pe_near(out, segs[0][2]) if out.parts else lw.next_pe()
    bb = lw.buf(pe, (f1 - f0) * d * isz, f"{n.id}.rows")
    lw.dma(False, pe, bb, past, f0 * d, f1 - f0, d, d, n.id, role="kv")
    bb = _convert(lw, n, pe, bb, past.dtype, out.dtype, f1 - f0, d, scale)
    out_isz = ITEMSIZE[out.dtype]
    for i, (s0, s1, o) in enumerate(segs):
        lw.dma(True, pe, bb, out, o, s1 - s0, d, d, n.id, role="kv",
               frees=[bb] if i == len(segs) - 1 else (),
               buf_offset=int((s0 - f0) * d * out_isz))


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
    per_new = _block_rows(lw, s_len, d, isz, b_ * h_ * s_len)
    if not in_place and p_len:  # in place (a paged / ring cache): only the new rows
        _copy_past(lw, n, past, out, d, isz, scale)
    for b in range(b_):
        for h in range(h_):
            _copy_rows(lw, n, new, out, b, h, s_len, p_len, d, isz, scale, per_new)
    return True
