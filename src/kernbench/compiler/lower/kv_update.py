"""KV_UPDATE: present[b, h] = concat(past[b, h], new[b, h]) along the sequence.

The past rows of every head, taken as one contiguous run, in even blocks (at most one TCM
bank, small enough that every PE gets a block, `kv_rows.block_rows`), and the new rows per
(batch, head): DMA them in, convert them when the cache is stored at other bits
(VE_QUANTIZE with the calibrated scale for int16 / int8 / int4, VE_COPY for fp16), DMA
them into their rows of the present cache (a 4-bit cache is packed two values a byte: its
DMAs move the packed bytes). Caches the tiles cannot write (another axis, non-contiguous,
odd rows of a 4-bit cache) run as a layer op. When the projection that computes the new
rows stores them into the cache itself (`kv_rows`), only the past rows are
copied here.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.kv_rows import (
    block_rows,
    head_runs,
    kv_update_tiled,
    new_blocks,
    past_blocks,
    present_row,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: a past-copy block moves through TCM in chunks of at most this many source bytes
#: (`_copy_block`): small enough that a load queued behind one waits little, large enough
#: that the DMA's fixed cost (setup, HBM latency) stays below its transfer time (the
#: fastest chunk on the gpt2-small decode step; whole blocks are slower)
CHUNK_BYTES = 16384


def _convert_into(lw: Lowering, n: LayerIR, pe: int, bb: Buf, bq: Buf, out_dtype: str,
                  rows: int, d: int, scale: float | None, frees: list[Buf]) -> None:
    """The fp32 rows in `bb` at the cache's bits into `bq` (`_convert`'s ops)."""
    if out_dtype == "fp16":
        lw.op("VE_COPY_TILE", pe, n.id,
              {"length": d, "rows": rows, "qbits_activation": 32, "out_qbits": 16},
              reads=[("in", bb)], writes=[("out", bq)], frees=frees)
        return
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": d, "rows": rows, "qbits_activation": 32, "out_qbits": QBITS_OF[out_dtype],
           "scale": scale, "zero_point": 0},
          reads=[("in", bb)], writes=[("out", bq)], frees=frees)


def _convert(lw: Lowering, n: LayerIR, pe: int, bb: Buf, src_dtype: str, out_dtype: str,
             rows: int, d: int, scale: float | None) -> Buf:
    """The rows in `bb` at the cache's bits: VE_COPY to fp16, VE_QUANTIZE with the
    calibrated scale to int16 / int8 / int4 (into a new buffer, `bb` freed), or `bb`
    itself when the bits are the same."""
    if src_dtype == out_dtype:
        return bb
    bq = lw.buf(pe, rows * d * ITEMSIZE[out_dtype], f"{n.id}.rowsq")
    _convert_into(lw, n, pe, bb, bq, out_dtype, rows, d, scale, frees=[bb])
    return bq


def _copy_rows(lw: Lowering, n: LayerIR, src: Placement, out: Placement, b: int, h: int,
               rows: int, dst_row: int, d: int, isz: float, scale: float | None,
               per: int) -> None:
    """Rows [0, rows) of src[b, h] (d wide) into rows [dst_row, dst_row + rows) of
    out[b, h], `per` rows a block. A block runs in the cube holding its rows of a spread
    cache (the store is local; the past rows are read from that cube's copy)."""
    for r0, r in new_blocks(rows, per):
        o = b * out.strides[0] + h * out.strides[1] + (dst_row + r0) * d
        pe = lw.pe_near(out, o) if out.parts else lw.next_pe()
        bb = lw.buf(pe, r * d * isz, f"{n.id}.rows")
        off = b * src.strides[0] + h * src.strides[1] + r0 * src.strides[2]
        lw.dma(False, pe, bb, src, off, r, d, src.strides[2], n.id, role="kv")
        bb = _convert(lw, n, pe, bb, src.dtype, out.dtype, r, d, scale)
        lw.dma(True, pe, bb, out, o, r, d, d, n.id, role="kv", frees=[bb])


def _copy_heads(lw: Lowering, n: LayerIR, src: Placement, out: Placement, b: int,
                heads: tuple[int, int], dst_row: int, d: int, isz: float,
                scale: float | None) -> None:
    """The one new row of heads [h0, h0 + hn) of batch b (src[b, h, 0]) into row
    `dst_row` of each head's present rows: one load, conversion and store for the run,
    its rows a head stride apart on both sides (`kv_rows.head_runs`: in one cube)."""
    h0, hn = heads
    o = b * out.strides[0] + h0 * out.strides[1] + dst_row * d
    pe = lw.pe_near(out, o) if out.parts else lw.next_pe()
    bb = lw.buf(pe, hn * d * isz, f"{n.id}.rows")
    lw.dma(False, pe, bb, src, b * src.strides[0] + h0 * src.strides[1], hn, d,
           src.strides[1], n.id, role="kv")
    bb = _convert(lw, n, pe, bb, src.dtype, out.dtype, hn, d, scale)
    lw.dma(True, pe, bb, out, o, hn, d, out.strides[1], n.id, role="kv", frees=[bb])


def _copy_past(lw: Lowering, n: LayerIR, past: Placement, out: Placement, d: int,
               isz: float, scale: float | None) -> None:
    """Every head's past rows into the first rows of its present rows. The past is
    contiguous, so the heads whose present rows live in one cube form one run of rows,
    cut into even blocks: one load per block, and a store per head the block covers.
    Even blocks, not blocks per head, so that the PEs copy the same bytes (heads of 1024
    rows in blocks of 192 left some PEs two blocks and others one of 64 rows)."""
    b_, h_, p_len, _ = past.shape
    for f0, f1 in past_blocks(lw, past, out, d, isz):
        _copy_block(lw, n, past, out, f0, f1, h_, p_len, d, isz, scale)


def _copy_block(lw: Lowering, n: LayerIR, past: Placement, out: Placement, f0: int, f1: int,
                h_: int, p_len: int, d: int, isz: float, scale: float | None) -> None:
    """Past rows [f0, f1) of the (batch · head · row) run on one PE, in chunks of at most
    `CHUNK_BYTES` through the same two buffers: per chunk a load, a conversion and a store
    per head it covers. Reusing the buffers chains the chunks (a load waits until the
    previous chunk is converted, a conversion until its store has read the buffer), so
    the copy, which nothing in its layer waits for, never holds more than one load in the
    PE's first-come-first-served DMA read channel: a load on the critical path queues
    behind one chunk, not behind the whole block."""
    pe = lw.pe_near(out, _seg_offset(out, h_, p_len, d, f0)) if out.parts else lw.next_pe()
    chunk = max(1, min(f1 - f0, int(CHUNK_BYTES // (d * isz))))
    bb = lw.buf(pe, chunk * d * isz, f"{n.id}.rows")
    bq = bb if past.dtype == out.dtype else \
        lw.buf(pe, chunk * d * ITEMSIZE[out.dtype], f"{n.id}.rowsq")
    out_isz = ITEMSIZE[out.dtype]
    for c0 in range(f0, f1, chunk):
        c1 = min(f1, c0 + chunk)
        last = c1 == f1
        lw.dma(False, pe, bb, past, c0 * d, c1 - c0, d, d, n.id, role="kv")
        if bq is not bb:
            _convert_into(lw, n, pe, bb, bq, out.dtype, c1 - c0, d, scale,
                          frees=[bb] if last else [])
        segs = _segments(out, h_, p_len, d, c0, c1)
        for i, (s0, s1, o) in enumerate(segs):
            lw.dma(True, pe, bq, out, o, s1 - s0, d, d, n.id, role="kv",
                   frees=[bq] if last and i == len(segs) - 1 else (),
                   buf_offset=int((s0 - c0) * d * out_isz))


def _seg_offset(out: Placement, h_: int, p_len: int, d: int, f: int) -> int:
    """Present element offset of row f of the (batch · head · row) run."""
    bh, row = divmod(f, p_len)
    return present_row(out, h_, bh, row, d)


def _segments(out: Placement, h_: int, p_len: int, d: int, f0: int,
              f1: int) -> list[tuple[int, int, int]]:
    """(first run row, end, present element offset) per head of run rows [f0, f1)."""
    segs = []
    f = f0
    while f < f1:
        row = f % p_len
        end = min(f1, f + p_len - row)
        segs.append((f, end, _seg_offset(out, h_, p_len, d, f)))
        f = end
    return segs


def lower_kv_update(lw: Lowering, n: LayerIR) -> bool:
    """The present cache from past and new rows; a cache stored at KV bits is quantized on
    the way (VE_QUANTIZE with its calibrated scale)."""
    if not kv_update_tiled(lw, n):
        return False
    past = lw.placement(n.inputs[0])
    out = lw.plan.placements[n.outputs[0]]
    scale = lw.plan.scales.get(out.key)
    b_, h_, p_len, d = past.shape
    # None: the projection stored the new rows itself (`kv_rows`), only the past is ours
    new = None if lw.lowering_plan.feeds_kv_update(n.id) else lw.placement(n.inputs[1])
    isz = max(ITEMSIZE[past.dtype], ITEMSIZE[new.dtype] if new is not None else 0)
    # in place (a paged / ring cache) the past rows are already where they belong
    if not node_attrs(n).in_place and p_len:
        _copy_past(lw, n, past, out, d, isz, scale)
    if new is None:
        return True
    s_len = new.shape[2]
    if s_len == 1:  # a decode step: the new rows of a sequence's heads move together
        for b in range(b_):
            for h0, hn in head_runs(lw, out, b, (b_, h_), p_len, d, isz):
                _copy_heads(lw, n, new, out, b, (h0, hn), p_len, d, isz, scale)
        return True
    per_new = block_rows(lw, s_len, d, isz, b_ * h_ * s_len)
    for b in range(b_):
        for h in range(h_):
            _copy_rows(lw, n, new, out, b, h, s_len, p_len, d, isz, scale, per_new)
    return True
