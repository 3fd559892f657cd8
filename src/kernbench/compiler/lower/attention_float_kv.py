"""The KV-block loop of a float ATTENTION (fp32, or fp16 / bf16 operands) whose K / V of
one head do not fit a TCM bank (`kv_block`, set by `compiler.kv_blocks`).

Per (batch, KV group) on one PE and per block of query rows: the Q rows of every head of
the group are loaded once (rounded to the activation format by a VE_COPY_TILE at a
16-bit float width); each head gets a running state (m, l, alpha per row, from a constant:
m = -inf) and a running fp32 output. Then per KV block of `kv_block` keys: K_j and V_j are
loaded in fp32 (and rounded to the KV format likewise), and for each head:
1. TE_GEMM Q·K_jᵀ into fp32, scaled by the softmax scale (VE_DEQUANTIZE_TILE of an fp32
   input);
2. VE_SOFTMAX_BLOCK_TILE with the mask block and the block's causal offset: e_j =
   exp(x - m'), the state updated in place;
3. TE_GEMM e_j·V_j (fp32 probabilities, V at its format) into fp32;
4. VE_ATTN_MERGE_TILE of the fp32 block (`in_dtype` float32, row scales of 1):
   out = out·alpha + acc, divided by l after the last block; then a strided DMA store.
Numerics: the online softmax (`numerics.flash`) equals the unblocked softmax the
interpreter computes (`numerics.attention`: float attention has no blocked semantics)
up to fp32 rounding, within the float tolerance of `--verify` (docs/verification.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.compiler.lower.attention_float_tiles import FloatAttention, load_rows
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.numerics.flash import STATE_WIDTH, init_state


def _scores(lw: Lowering, n: LayerIR, fa: FloatAttention, pe: int, q: Buf, k: Buf, s: int,
            tb: int) -> Buf:
    """fp32 scaled scores of `s` query rows against `tb` keys (K_j freed by the caller)."""
    raw = lw.buf(pe, s * tb * 4, f"{n.id}.scores")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": tb, "k": fa.q.shape[3], "qbits_weight": 16 if fa.kv_fmt else 32,
           "qbits_activation": 16 if fa.q_fmt else 32, "ofm_qbits": 32,
           "transpose_wgt": True, **fa.te},
          reads=[("ifm", q), ("wgt", k)], writes=[("ofm", raw)])
    sc = lw.buf(pe, s * tb * 4, f"{n.id}.s32")
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": tb, "rows": s, "qbits_activation": 32, "out_qbits": 32,
           "scale": fa.scale, "in_dtype": "float32"},
          reads=[("in", raw)], writes=[("out", sc)], frees=[raw])
    return sc


def _block_step(lw: Lowering, n: LayerIR, fa: FloatAttention, pe: int, bh: tuple[int, int],
                rows: tuple[int, int], cols: tuple[int, int], ops: tuple[Buf, Buf, Buf, Buf],
                run: tuple[Buf, Buf], free_kv: bool, ends: tuple[bool, bool]) -> None:
    """One head, one query block, one KV block [j0, j0 + tb): scores, online softmax,
    e·V, merged into the running output `run` = (state, out); `ops` = (Q rows, K_j, V_j,
    row scales of 1); `free_kv`: the last head releases K_j and V_j; `ends` = (first
    block, last block with the division by l)."""
    (b, h), (s0, s), (j0, tb) = bh, rows, cols
    q, k, v, ones = ops
    st, out = run
    sc = _scores(lw, n, fa, pe, q, k, s, tb)
    fields: dict[str, Any] = {"length": tb, "rows": s, "qbits_activation": 32, "out_qbits": 32}
    reads = [("in", sc), ("state", st)]
    frees = [sc] + ([k] if free_kv else [])
    if fa.mask is not None:
        m = fa.mask
        bm = lw.buf(pe, s * tb * 4, f"{n.id}.mask")
        moff = ((b % m.shape[0]) * m.strides[0] + (h % m.shape[1]) * m.strides[1]
                + s0 * m.strides[2] + j0)
        lw.dma(False, pe, bm, m, moff, s, tb, m.strides[2], n.id)
        reads.append(("bias", bm))
        frees.append(bm)
    if fa.causal_offset is not None:
        fields["causal_offset"] = fa.causal_offset + s0 - j0
    e = lw.buf(pe, s * tb * 4, f"{n.id}.e")
    lw.op("VE_SOFTMAX_BLOCK_TILE", pe, n.id, fields, reads=reads,
          writes=[("out", e), ("state", st)], frees=frees)
    dv = fa.v.shape[3]
    acc = lw.buf(pe, s * dv * 4, f"{n.id}.oacc")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": dv, "k": tb, "qbits_weight": 16 if fa.kv_fmt else 32,
           "qbits_activation": 32, "ofm_qbits": 32, **fa.te},
          reads=[("ifm", e), ("wgt", v)], writes=[("ofm", acc)],
          frees=[e, v] if free_kv else [e])
    first, last = ends
    lw.op("VE_ATTN_MERGE_TILE", pe, n.id,
          {"length": dv, "rows": s, "qbits_activation": 32, "out_qbits": 32,
           "in_dtype": "float32", "scale": 1.0, "first": first, "last": last},
          reads=[("in", acc), ("row_scale", ones), ("state", st)]
          + ([] if first else [("out", out)]),
          writes=[("out", out)], frees=[acc])


def lower_float_kv_blocks(lw: Lowering, n: LayerIR, fa: FloatAttention, pe: int, b: int,
                          g: int) -> None:
    """Every head of KV group g of batch b, blocked along the KV sequence by
    `fa.kv_block` keys (module doc), on PE `pe`."""
    rep = fa.q.shape[1] // fa.k.shape[1]
    s_len, d, dv, t_len = fa.q.shape[2], fa.q.shape[3], fa.v.shape[3], fa.k.shape[2]
    blk = fa.kv_block
    st0 = lw.const(f"{n.id}@state0", init_state((fa.s_blk,)), "fp32")
    ones_c = lw.const(f"{n.id}@ones", np.ones((fa.s_blk,), np.float32), "fp32")
    q, out = fa.q, fa.out
    for s0 in range(0, s_len, fa.s_blk):
        s = min(fa.s_blk, s_len - s0)
        heads = [g * rep + hh for hh in range(rep)]
        ones = lw.buf(pe, s * 4, f"{n.id}.ones")
        lw.dma(False, pe, ones, ones_c, 0, 1, s, s, n.id, role="weight")
        qs = [load_rows(lw, n, pe, q, b * q.strides[0] + h * q.strides[1] + s0 * q.strides[2],
                   s, d, "q32", "activation", fa.q_fmt) for h in heads]
        runs = []
        for _ in heads:
            st = lw.buf(pe, s * STATE_WIDTH * 4, f"{n.id}.state")
            lw.dma(False, pe, st, st0, 0, 1, s * STATE_WIDTH, s * STATE_WIDTH, n.id,
                   role="weight")
            runs.append((st, lw.buf(pe, s * dv * 4, f"{n.id}.o32")))
        for j0 in range(0, t_len, blk):
            tb = min(blk, t_len - j0)
            k, v = (load_rows(lw, n, pe, p, b * p.strides[0] + g * p.strides[1]
                              + j0 * p.strides[2], tb, p.shape[3], tag, "kv", fa.kv_fmt, sc)
                    for p, tag, sc in zip((fa.k, fa.v), ("k32", "v32"),
                                          fa.kv_scales or (None, None), strict=True))
            ends = (j0 == 0, j0 + tb >= t_len)
            for i, h in enumerate(heads):
                _block_step(lw, n, fa, pe, (b, h), (s0, s), (j0, tb), (qs[i], k, v, ones),
                            runs[i], free_kv=i == len(heads) - 1, ends=ends)
        for i, h in enumerate(heads):
            st, o32 = runs[i]
            ooff = b * out.strides[0] + h * out.strides[1] + s0 * out.strides[2]
            lw.dma(True, pe, o32, out, ooff, s, dv, out.strides[2], n.id,
                   frees=[o32, st, qs[i]] + ([ones] if i == len(heads) - 1 else []))


__all__ = ["lower_float_kv_blocks"]
