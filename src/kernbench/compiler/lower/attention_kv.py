"""The KV-block loop of a tiled ATTENTION blocked along the KV sequence (`kv_block`).

Per (batch, KV group) on one PE and per block of query rows: the Q rows of every head of
the group are loaded and quantized once, each head gets a running state (m, l, alpha per
row, initialised from a constant: m = -inf) and a running output. Then per KV block of
`kv_block` keys: K_j and V_j are loaded (int8 from a cache stored at KV bits, else loaded
and quantized), and for each head:
1. TE_GEMM Q·K_jᵀ into int32 (int64 at A16: int16 Q and P), VE_DEQUANTIZE by
   s_q·s_k·scale;
2. VE_SOFTMAX_BLOCK_TILE with the mask block and the block's causal offset: exp(x - m'),
   state updated in place;
3. VE_ROWSCALE + VE_QUANTIZE of the block's probabilities, TE_GEMM P_j·V_j into int32;
4. VE_ATTN_MERGE_TILE: out = out·alpha + acc·(row scale·s_v), divided by l after the last
   block (an int64 acc is first cast to fp32 by a VE_DEQUANTIZE_TILE of scale 1, the
   cast the merge itself makes); the output rows are then stored with a strided DMA.
Numerics: `kernbench.numerics.flash` (the interpreter runs the same blocks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.attention_tiles import AttentionTiles
from kernbench.compiler.lower.context import FLOAT_DTYPES, QBITS_OF, Lowering, float_format
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.numerics.flash import STATE_WIDTH, init_state


def kv_te(bits_kv: object) -> dict[str, Any]:
    """TE_GEMM_TILE fields for K / V at KV bits: an int16 cache is read as int16, not as
    the ISA's default 16-bit type fp16."""
    return {"int16": True} if bits_kv == 16 else {}


def _kv_block(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int, g: int,
              j0: int, tb: int) -> list[Buf]:
    """Rows [j0, j0 + tb) of K and V of (batch b, KV group g) in TCM at KV bits (int4
    packed two a byte)."""
    kv = []
    kb = at.bits_kv / 8
    for src, dim, sc, tag in ((at.k, at.q.shape[3], at.scales[1], "k"),
                              (at.v, at.v.shape[3], at.scales[2], "v")):
        off = b * src.strides[0] + g * src.strides[1] + j0 * src.strides[2]
        bq = lw.buf(pe, tb * dim * kb, f"{n.id}.{tag}q")
        if src.dtype not in FLOAT_DTYPES:  # a cache already stored at KV bits
            lw.dma(False, pe, bq, src, off, tb, dim, src.strides[2], n.id, role="kv")
        else:
            b32 = lw.buf(pe, tb * dim * ITEMSIZE[src.dtype], f"{n.id}.{tag}32")
            lw.dma(False, pe, b32, src, off, tb, dim, src.strides[2], n.id, role="kv")
            lw.op("VE_QUANTIZE_TILE", pe, n.id,
                  {"length": dim, "rows": tb, "qbits_activation": QBITS_OF[src.dtype],
                   "out_qbits": at.bits_kv, "scale": float(sc), "zero_point": 0,
                   **float_format(src.dtype)},
                  reads=[("in", b32)], writes=[("out", bq)], frees=[b32])
        kv.append(bq)
    return kv


def q_rows(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int, h: int, s0: int,
           s: int, ve: dict[str, Any] | None = None, heads: int = 1) -> Buf:
    """Query rows [s0, s0 + s) of head h at the activation bits (int8, int16 at A16):
    loaded as they are when the projection stored them quantized
    (`xquant.kv_quant_out`), else loaded and quantized (VE_QUANTIZE on vector engine
    `ve`). With `heads` > 1 (and one row, s == 1): row s0 of heads h .. h + heads - 1,
    one row each (a decode step's query heads of one KV group,
    `AttentionTiles.packed_heads`)."""
    q, d = at.q, at.q.shape[3]
    off = b * q.strides[0] + h * q.strides[1] + s0 * q.strides[2]
    rows, stride = (heads, q.strides[1]) if heads > 1 else (s, q.strides[2])
    bqq = lw.buf(pe, rows * d * at.bits_a / 8, f"{n.id}.qq")
    if q.dtype == "int8":
        lw.dma(False, pe, bqq, q, off, rows, d, stride, n.id)
        return bqq
    bq32 = lw.buf(pe, rows * d * ITEMSIZE[q.dtype], f"{n.id}.q32")
    lw.dma(False, pe, bq32, q, off, rows, d, stride, n.id)
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": d, "rows": rows, "qbits_activation": QBITS_OF[q.dtype],
           "out_qbits": at.bits_a, "scale": float(at.scales[0]), "zero_point": 0,
           **(ve or {}), **float_format(q.dtype)},
          reads=[("in", bq32)], writes=[("out", bqq)], frees=[bq32])
    return bqq


def _block_step(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, bh: tuple[int, int],
                rows: tuple[int, int], cols: tuple[int, int], ops: tuple[Buf, Buf, Buf],
                run: tuple[Buf, Buf], free_kv: bool, ends: tuple[bool, bool],
                heads: int = 1) -> None:
    """One head, one query block, one KV block [j0, j0 + tb): scores, online softmax,
    P·V, merged into the running output `run` = (state, out); `free_kv`: the last head
    of the block releases K_j and V_j; `ends` = (first block of the range, last block
    with the division by l). With `heads` > 1: heads h .. h + heads - 1 packed, a row
    each (`AttentionTiles.packed_heads`; s == 1)."""
    (b, h), (s0, s), (j0, tb) = bh, rows, cols
    s1, s = s, s * heads  # rows of one head's mask; rows of the tiles
    qq, kq, vq = ops
    st, out = run
    wide = 8 if at.wide else 4  # accumulator bytes: int64 at A16
    acc = lw.buf(pe, s * tb * wide, f"{n.id}.scores")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": tb, "k": at.q.shape[3], "qbits_weight": at.bits_kv,
           "qbits_activation": at.bits_a, "transpose_wgt": True,
           **kv_te(at.bits_kv), **at.te_fields()},
          reads=[("ifm", qq), ("wgt", kq)], writes=[("ofm", acc)],
          frees=[kq] if free_kv else [])
    sc32 = lw.buf(pe, s * tb * 4, f"{n.id}.s32")
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": tb, "rows": s, "qbits_activation": 32, "out_qbits": 32,
           "scale": at.score_scale, "in_dtype": at.acc_dtype},
          reads=[("in", acc)], writes=[("out", sc32)], frees=[acc])
    fields: dict[str, Any] = {"length": tb, "rows": s, "qbits_activation": 32, "out_qbits": 32}
    reads = [("in", sc32), ("state", st)]
    frees = [sc32]
    if at.mask is not None:
        mask = at.mask
        isz = ITEMSIZE[mask.dtype]
        bm = lw.buf(pe, s * tb * isz, f"{n.id}.mask")
        if mask.dtype != "fp32":  # an fp16 / bf16 export's mask, widened by the tile
            fields.update(bias_qbits=QBITS_OF[mask.dtype], **float_format(mask.dtype))
        for i in range(heads):
            moff = ((b % mask.shape[0]) * mask.strides[0]
                    + ((h + i) % mask.shape[1]) * mask.strides[1] + s0 * mask.strides[2] + j0)
            lw.dma(False, pe, bm, mask, moff, s1, tb, mask.strides[2], n.id,
                   buf_offset=i * s1 * tb * isz)
        reads.append(("bias", bm))
        frees.append(bm)
    if at.causal:
        fields["causal_offset"] = at.causal_offset + s0 - j0
    e = lw.buf(pe, s * tb * 4, f"{n.id}.e")
    lw.op("VE_SOFTMAX_BLOCK_TILE", pe, n.id, fields, reads=reads,
          writes=[("out", e), ("state", st)], frees=frees)
    rsc = lw.buf(pe, s * 4, f"{n.id}.prow")
    lw.op("VE_ROWSCALE_TILE", pe, n.id,
          {"length": tb, "rows": s, "qbits_activation": 32, "bits": at.bits_a},
          reads=[("in", e)], writes=[("out", rsc)])
    pq = lw.buf(pe, s * tb * at.bits_a / 8, f"{n.id}.pq")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": tb, "rows": s, "qbits_activation": 32, "out_qbits": at.bits_a,
           "scale": 1.0, "zero_point": 0},
          reads=[("in", e), ("row_scale", rsc)], writes=[("out", pq)], frees=[e])
    dv = at.v.shape[3]
    pacc = lw.buf(pe, s * dv * wide, f"{n.id}.oacc")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": dv, "k": tb, "qbits_weight": at.bits_kv,
           "qbits_activation": at.bits_a, **kv_te(at.bits_kv), **at.te_fields()},
          reads=[("ifm", pq), ("wgt", vq)], writes=[("ofm", pacc)],
          frees=[pq, vq] if free_kv else [pq])
    in_dtype = "int32"
    if at.wide:  # the merge reads int32 or fp32: the int64 P·V as the fp32 it casts to
        p32 = lw.buf(pe, s * dv * 4, f"{n.id}.o64")
        lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
              {"length": dv, "rows": s, "qbits_activation": 32, "out_qbits": 32,
               "scale": 1.0, "in_dtype": "int64"},
              reads=[("in", pacc)], writes=[("out", p32)], frees=[pacc])
        pacc, in_dtype = p32, "float32"
    first, last = ends
    lw.op("VE_ATTN_MERGE_TILE", pe, n.id,
          {"length": dv, "rows": s, "qbits_activation": 32, "out_qbits": 32,
           "in_dtype": in_dtype, "scale": float(np.float32(at.scales[2])), "first": first,
           "last": last},
          reads=[("in", pacc), ("row_scale", rsc), ("state", st)]
          + ([] if first else [("out", out)]),
          writes=[("out", out)], frees=[pacc, rsc])


#: one head's query block after a key range: (head, first row, rows, state, fp32 output,
#: quantized Q rows, heads); the output is unnormalized when the range was kept for a
#: combine. With heads > 1 (one row, `AttentionTiles.packed_heads`) the buffers hold a
#: row for each of the heads from `head` on.
Run = tuple[int, int, int, Buf, Buf, Buf, int]


def lower_kv_blocks(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int,
                    g: int, keys: tuple[int, int] | None = None,
                    keep: bool = False) -> list[Run]:
    """Every head of KV group g of batch b over keys [lo, hi) (default: all), blocked
    along the KV sequence (module doc). `keep`: the outputs stay unnormalized in TCM and
    are returned for a combine (`attention_parts`); else they are stored and [] returned."""
    rep = at.q.shape[1] // at.k.shape[1]
    s_len, dv = at.q.shape[2], at.v.shape[3]
    lo, hi = keys or (0, at.t_len)
    blk = at.kv_block or hi - lo
    pack = at.packed_heads(lw.bank)
    st0 = lw.const(f"{n.id}@state0", init_state((max(at.s_blk, pack),)), "fp32")
    out = at.out
    kept: list[Run] = []
    for s0 in range(0, s_len, at.s_blk):
        s = min(at.s_blk, s_len - s0)
        heads = [g * rep] if pack > 1 else [g * rep + hh for hh in range(rep)]
        rows = s * pack
        qs = [q_rows(lw, n, at, pe, b, h, s0, s, heads=pack) for h in heads]
        runs = []
        for _ in heads:
            st = lw.buf(pe, rows * STATE_WIDTH * 4, f"{n.id}.state")
            lw.dma(False, pe, st, st0, 0, 1, rows * STATE_WIDTH, rows * STATE_WIDTH, n.id,
                   role="weight")
            runs.append((st, lw.buf(pe, rows * dv * 4, f"{n.id}.o32")))
        for j0 in range(lo, hi, blk):
            tb = min(blk, hi - j0)
            kq, vq = _kv_block(lw, n, at, pe, b, g, j0, tb)
            ends = (j0 == lo, not keep and j0 + tb >= hi)
            for i, h in enumerate(heads):
                _block_step(lw, n, at, pe, (b, h), (s0, s), (j0, tb), (qs[i], kq, vq), runs[i],
                            free_kv=i == len(heads) - 1, ends=ends, heads=pack)
        for i, h in enumerate(heads):
            st, o32 = runs[i]
            if keep:
                kept.append((h, s0, s, st, o32, qs[i], pack))
                continue
            ob = to_out_dtype(lw, n, pe, o32, out.dtype, rows, dv)
            at.store(lw, n, pe, ob, b, h, s0, s, [ob, st, qs[i]], pack)
    return kept


def to_out_dtype(lw: Lowering, n: LayerIR, pe: int, o32: Buf, dtype: str, s: int,
                  dv: int) -> Buf:
    """The merged fp32 output rows as the output's dtype: rounded once by a VE_COPY into
    an fp16 / bf16 buffer (o32 freed), or o32 itself; the store frees the result."""
    if dtype == "fp32":
        return o32
    o16 = lw.buf(pe, s * dv * ITEMSIZE[dtype], f"{n.id}.o16")
    lw.op("VE_COPY_TILE", pe, n.id, {"length": dv, "rows": s, "qbits_activation": 32,
                                     "out_qbits": QBITS_OF[dtype], **float_format(dtype)},
          reads=[("in", o32)], writes=[("out", o16)], frees=[o32])
    return o16
