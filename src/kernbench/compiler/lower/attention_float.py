"""Float ATTENTION (qbits None: fp32 models, imported QDQ / dynamic-quantized graphs whose
attention the exporter left in float; or fp16 / bf16 activations or KV from a QConfig),
tiled like the integer one (lower/attention.py).

Per (batch, KV group), on one PE, K and V are loaded in fp32 once (and rounded to the KV
format by a VE_COPY_TILE when the KV width is fp16 / bf16); per query head of the group
and block of query rows: Q rows load (rounded to the activation format likewise),
TE_GEMM_TILE Q·Kᵀ into fp32 (`transpose_wgt`), VE_SOFTMAX_TILE with the softmax scale,
soft-cap, additive mask rows and causal offset, TE_GEMM_TILE P·V (fp32 probabilities,
V at its format) into fp32, a strided DMA store into the output (a folded transpose's
layout). The roundings are the interpreter's (`numerics.attention`: a 16-bit float width
rounds Q, K and V, the probabilities stay fp32; an integer activation width with a float
KV computes Q in fp32). `lower_any_attention` is the LOWERINGS entry: float layers here, integer ones to
`lower_attention`. When the K / V of one head do not fit a TCM bank the layer carries
`kv_block` (`compiler.kv_blocks`) and runs the online-softmax KV-block loop instead
(`attention_float_kv`). A float attention that `layout.tiled_attention` refuses (not all
fp32, no positive scale, a mask without whole (S, T) rows) runs whole as a layer op; a
16-bit-width one whose Q / K / V are stored in a float type other than fp32 or their own
format does too (a whole-layer op reads the strided views of folded transposes).
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.layout import float_formats
from kernbench.compiler.lower.attention import lower_attention
from kernbench.compiler.lower.attention_float_kv import lower_float_kv_blocks
from kernbench.compiler.lower.attention_float_tiles import FloatAttention, load_rows
from kernbench.compiler.lower.attention_tiling import (
    attention_tiled,
    float_groups,
    float_stored_ok,
    kv_scales,
    kv_step,
)
from kernbench.compiler.lower.context import Lowering, float_format
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


def _unfit(n: LayerIR) -> ValueError:
    return ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")


def _plan(lw: Lowering, n: LayerIR) -> FloatAttention:
    """Placements and block size; ValueError if `tiled_attention` accepted a layer whose
    shapes the tiles cannot take (its transposes are already folded into strided views)."""
    q, k, v = (lw.placement(t) for t in n.inputs[:3])
    out = lw.plan.placements[n.outputs[0]]
    if not float_stored_ok(lw, n, q, k, v, out):
        raise _unfit(n)
    t_len = k.shape[2]
    step = kv_step(n, t_len)
    if step * max(q.shape[3], v.shape[3]) * 4 > lw.bank or step * 4 > lw.bank:
        raise _unfit(n)
    mask = None
    if len(n.inputs) > 3 and n.inputs[3]:
        mt = lw.g.tensors[n.inputs[3]]
        if mt.dtype == "bool":  # a constant boolean mask: the 0 / -inf bias it means
            m = np.asarray(lw.g.weights[n.inputs[3]], bool)
            bias = np.where(m, np.float32(0), np.float32(-np.inf)).astype(np.float32)
            mask = lw.const(f"{n.inputs[3]}@bias", bias, "fp32", source=n.inputs[3])
        else:
            mask = lw.placement(n.inputs[3])
        if mask.strides[3] != 1:
            raise _unfit(n)
    a = node_attrs(n)
    q_fmt, kv_fmt = float_formats(n) or (None, None)
    return FloatAttention(q, k, v, out, mask, float(a.scale),
                          float(a.softcap or 0.0),
                          int(a.causal_offset) if a.causal else None,
                          max(1, min(q.shape[2], lw.bank // (step * 4))), q_fmt, kv_fmt,
                          float_format(q_fmt, kv_fmt), step if step < t_len else 0,
                          kv_scales(lw, n))


def _block(lw: Lowering, n: LayerIR, fa: FloatAttention, pe: int, idx: tuple[int, int, int],
           s: int, kv: tuple[Buf, Buf], last: bool) -> None:
    """Rows [s0, s0 + s) of head h of batch b: scores, softmax, P·V, store."""
    b, h, s0 = idx
    q, t_len, d, dv = fa.q, fa.k.shape[2], fa.q.shape[3], fa.v.shape[3]
    bq = load_rows(lw, n, pe, q, b * q.strides[0] + h * q.strides[1] + s0 * q.strides[2], s, d,
               "q32", fmt=fa.q_fmt)
    sc = lw.buf(pe, s * t_len * 4, f"{n.id}.scores")
    qw = 16 if fa.kv_fmt else 32
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": t_len, "k": d, "qbits_weight": qw,
           "qbits_activation": 16 if fa.q_fmt else 32, "ofm_qbits": 32,
           "transpose_wgt": True, **fa.te},
          reads=[("ifm", bq), ("wgt", kv[0])], writes=[("ofm", sc)], frees=[bq])
    fields = {"length": t_len, "rows": s, "qbits_activation": 32, "out_qbits": 32,
              "scale": fa.scale}
    reads, frees = [("in", sc)], [sc]
    if fa.mask is not None:
        m = fa.mask
        moff = ((b % m.shape[0]) * m.strides[0] + (h % m.shape[1]) * m.strides[1]
                + s0 * m.strides[2])
        bm = load_rows(lw, n, pe, m, moff, s, t_len, "mask")
        reads.append(("bias", bm))
        frees.append(bm)
    if fa.causal_offset is not None:
        fields["causal_offset"] = fa.causal_offset + s0
    if fa.softcap:
        fields["softcap"] = fa.softcap
    prob = lw.buf(pe, s * t_len * 4, f"{n.id}.p")
    lw.op("VE_SOFTMAX_TILE", pe, n.id, fields, reads=reads, writes=[("out", prob)],
          frees=frees)
    o = lw.buf(pe, s * dv * 4, f"{n.id}.o32")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": s, "n": dv, "k": t_len, "qbits_weight": qw, "qbits_activation": 32,
           "ofm_qbits": 32, **fa.te},
          reads=[("ifm", prob), ("wgt", kv[1])], writes=[("ofm", o)],
          frees=[prob] + (list(kv) if last else []))
    out = fa.out
    ooff = b * out.strides[0] + h * out.strides[1] + s0 * out.strides[2]
    lw.dma(True, pe, o, out, ooff, s, dv, out.strides[2], n.id, frees=[o])


def lower_float_attention(lw: Lowering, n: LayerIR) -> bool:
    """Tile a float ATTENTION (see the module doc); False: it runs whole."""
    if float_formats(n) is None or not attention_tiled(lw, n):
        return False
    fa = _plan(lw, n)
    s_len = fa.q.shape[2]
    rep = fa.q.shape[1] // fa.k.shape[1]
    for b, g in float_groups(lw, n):
        pe = lw.next_pe()
        if fa.kv_block:
            lower_float_kv_blocks(lw, n, fa, pe, b, g)
            continue
        kv = tuple(load_rows(lw, n, pe, p, b * p.strides[0] + g * p.strides[1],
                             p.shape[2], p.shape[3], tag, "kv", fa.kv_fmt, sc)
                   for p, tag, sc in zip((fa.k, fa.v), ("k32", "v32"),
                                         fa.kv_scales or (None, None), strict=True))
        for hh in range(rep):
            for s0 in range(0, s_len, fa.s_blk):
                s = min(fa.s_blk, s_len - s0)
                last = hh == rep - 1 and s0 + s >= s_len
                _block(lw, n, fa, pe, (b, g * rep + hh, s0), s, kv, last)
    return True


def lower_any_attention(lw: Lowering, n: LayerIR) -> bool:
    """The LOWERINGS entry for ATTENTION: float layers (fp32, or a 16-bit float width)
    tiled here, the others by `lower_attention` (integer)."""
    if float_formats(n) is not None:
        return lower_float_attention(lw, n)
    return lower_attention(lw, n)


__all__ = ["lower_any_attention", "lower_float_attention"]
