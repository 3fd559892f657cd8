"""ATTENTION with integer Q·K and P·V, tiled per (batch, KV group) and query row block.

Per (batch, KV group), on one PE: K and V are loaded (already int8 when the cache is
stored at KV bits) or loaded and quantized once (VE_QUANTIZE with their static scales).
Per query head of the group and block of query rows:
1. scores: Q rows load + VE_QUANTIZE, TE_GEMM Q·Kᵀ (`transpose_wgt`) into int32,
   VE_DEQUANTIZE by s_q·s_k·scale;
2. probabilities: VE_SOFTMAX with the additive mask rows and the causal offset, then P is
   quantized with a per-row scale (VE_ROWSCALE: row max / 127, VE_QUANTIZE);
3. output: TE_GEMM P·V into int32, VE_DEQUANTIZE by s_v and the row scales, strided DMA
   store into the (B, S, H, D) output (a folded transpose's layout).
The whole K/V of one head must fit a TCM bank (T × D × 4 bytes), unless the layer is blocked
along the KV sequence (`kv_block`, set by `compiler.kv_blocks`): then `attention_kv` runs the
KV-block loop with an online softmax. With `kv_parts` (few query rows, many keys: a decode
step) the keys are split into ranges on PEs of their own and combined (`attention_parts`).
Layers `tiled_attention` refuses run as a layer op.
Q, K, V, the mask and the output may be fp32, fp16 or bf16 in HBM (an fp16 / bf16 export):
the tiles quantize from and dequantize to the stored width.
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import groupby
from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.attention_kv import kv_te, lower_kv_blocks, q_rows
from kernbench.compiler.lower.attention_parts import lower_kv_parts
from kernbench.compiler.lower.attention_tiles import AttentionTiles
from kernbench.compiler.lower.attention_tiling import attention_tiled
from kernbench.compiler.lower.context import FLOAT_DTYPES, QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.xquant import (
    QuantOut,
    drop_unwritten,
    heads_as_rows,
    kv_scratch,
    quant_out,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs
from kernbench.numerics.flash import kv_part_bounds, longest_part

#: (te_id field, ve_id field) of one query block's ops (empty with one engine)
Engines = tuple[dict[str, Any], dict[str, Any]]


def _unfit(n: LayerIR) -> ValueError:
    return ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")


def _kv_dtype(n: LayerIR) -> str:
    """The dtype of a K / V cache stored at the layer's KV bits (int8, int16, or int4
    packed)."""
    return f"int{n.qbits_kv}"


def _mask(lw: Lowering, n: LayerIR) -> Placement | None:
    """The additive mask (a constant boolean one as the bias the interpreter builds)."""
    if not (len(n.inputs) > 3 and n.inputs[3]):
        return None
    mt = lw.g.tensors[n.inputs[3]]
    if mt.dtype == "bool":
        m = np.asarray(lw.g.weights[n.inputs[3]], bool)
        bias = np.where(m, np.float32(0), np.float32(-np.inf)).astype(np.float32)
        mask = lw.const(f"{n.inputs[3]}@bias", bias, "fp32", source=n.inputs[3])
    else:
        mask = lw.placement(n.inputs[3])
    if mask.strides[3] != 1:
        raise ValueError(f"{n.id}: mask must be contiguous in its last axis")
    return mask


def _static_scales(lw: Lowering, n: LayerIR) -> list[np.ndarray]:
    scales = []
    for tid in n.inputs[:3]:
        t = lw.g.tensors[tid]
        if t.quant is None or t.quant.zero_point:
            raise _unfit(n)
        scales.append(np.asarray(lw.g.weights[t.quant.scale], np.float32).reshape(()))
    return scales


def _planned_scratch(lw: Lowering, vid: str) -> Placement | None:
    """`kv_scratch` before the projection's tiles allocate it (the plan pass asks): the
    float placement seen as the int8 copy's view. Only its shape and strides are read
    then: the blocks and the PEs they draw on one cube."""
    for ks in lw.lowering_plan.kv_stores.values():
        if ks.view == vid:
            return lw.placement(vid).view(ks.view_shape, ks.view_strides, dtype="int8")
    return None


def plan_attention(lw: Lowering, n: LayerIR, planned: bool = False) -> AttentionTiles:
    """Placements, scales and block size of a tiled attention; ValueError if it cannot be
    tiled although `tiled_attention` accepted it. `planned`: asked before the tiles (the
    plan pass), Q / K / V stored at 8 bits by their projection are not allocated yet."""
    # Q at 8 bits, K / V at 8 KV bits, stored by the projection that produced them
    # (`xquant.kv_quant_out`)
    scratch = _planned_scratch if planned else kv_scratch
    q, k, v = (scratch(lw, t) or lw.placement(t) for t in n.inputs[:3])
    out = lw.plan.placements[n.outputs[0]]
    floats = {p.dtype for p in (q, k, v, out)} & set(FLOAT_DTYPES)
    if q.dtype not in (*FLOAT_DTYPES, "int8") or out.dtype not in FLOAT_DTYPES or any(
            p.strides[3] != 1 for p in (q, k, v, out)) or any(
            p.dtype not in (*FLOAT_DTYPES, _kv_dtype(n)) for p in (k, v)) \
            or {"fp16", "bf16"} <= floats:
        raise _unfit(n)
    sq, sk, sv = _static_scales(lw, n)
    mask = _mask(lw, n)
    d, t_len, dv = q.shape[3], k.shape[2], v.shape[3]
    if mask is not None and mask.shape[-1] < t_len:
        raise _unfit(n)
    a = node_attrs(n)
    blk = int(a.kv_block or 0)
    parts = max(1, int(a.kv_parts or 1))
    first = int(a.kv_first or 0)
    if parts > 1 and (n.qbits_activation is None or a.softcap):
        raise _unfit(n)
    acc = 8 if n.qbits_activation == 16 else 4  # int64 accumulators at A16
    part_len = longest_part(t_len, parts, first)
    step = blk if 0 < blk < part_len else part_len
    at = AttentionTiles(
        q, k, v, out, mask, (sq, sk, sv),
        score_scale=float(np.float32(sq) * np.float32(sk) * np.float32(a.scale)),
        bits_a=n.qbits_activation, bits_kv=n.qbits_kv, causal=bool(a.causal),
        causal_offset=int(a.causal_offset) if a.causal else 0,
        s_blk=max(1, min(q.shape[2], lw.bank // (step * acc))),
        kv_block=blk if step < part_len else 0, kv_parts=parts, kv_first=first,
        softcap=float(a.softcap or 0.0))
    kv_isz = ITEMSIZE[k.dtype] if k.dtype == v.dtype == _kv_dtype(n) else 4  # fp32 staged?
    if step * d * kv_isz > lw.bank or step * dv * kv_isz > lw.bank or step * acc > lw.bank:
        raise _unfit(n)
    return at


def _load_kv(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int,
             g: int) -> list[Buf]:
    """K and V of (batch b, KV group g) in TCM at KV bits, quantized on the way if
    needed (a 4-bit K / V moves packed, two values a byte)."""
    kv = []
    t_len = at.t_len
    kb = at.bits_kv / 8
    for src, dim, sc, tag in ((at.k, at.q.shape[3], at.scales[1], "k"),
                              (at.v, at.v.shape[3], at.scales[2], "v")):
        off = b * src.strides[0] + g * src.strides[1]
        if src.dtype not in FLOAT_DTYPES:  # a cache already stored at KV bits
            bq = lw.buf(pe, t_len * dim * kb, f"{n.id}.{tag}q")
            lw.dma(False, pe, bq, src, off, t_len, dim, src.strides[2], n.id, role="kv")
            kv.append(bq)
            continue
        b32 = lw.buf(pe, t_len * dim * ITEMSIZE[src.dtype], f"{n.id}.{tag}32")
        lw.dma(False, pe, b32, src, off, t_len, dim, src.strides[2], n.id, role="kv")
        bq = lw.buf(pe, t_len * dim * kb, f"{n.id}.{tag}q")
        lw.op("VE_QUANTIZE_TILE", pe, n.id,
              {"length": dim, "rows": t_len, "qbits_activation": QBITS_OF[src.dtype],
               "out_qbits": at.bits_kv, "scale": float(sc), "zero_point": 0,
               **lw.engines.ve(pe), **float_format(src.dtype)},
              reads=[("in", b32)], writes=[("out", bq)], frees=[b32])
        kv.append(bq)
    return kv


def _scores(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int, h: int,
            s0: int, s: int, kq: Buf, eng: Engines, heads: int = 1) -> Buf:
    """fp32 scores of query rows [s0, s0 + s) of head h against all keys (with `heads`
    > 1: row s0 of heads h .. h + heads - 1, `AttentionTiles.packed_heads`)."""
    te, ve = eng
    d, t_len = at.q.shape[3], at.t_len
    bqq = q_rows(lw, n, at, pe, b, h, s0, s, ve, heads)
    rows = s * heads
    acc = lw.buf(pe, rows * t_len * (8 if at.wide else 4), f"{n.id}.scores")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": rows, "n": t_len, "k": d, "qbits_weight": at.bits_kv,
           "qbits_activation": at.bits_a, "transpose_wgt": True, **te,
           **kv_te(at.bits_kv), **at.te_fields()},
          reads=[("ifm", bqq), ("wgt", kq)], writes=[("ofm", acc)], frees=[bqq])
    sc32 = lw.buf(pe, rows * t_len * 4, f"{n.id}.s32")
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": t_len, "rows": rows, "qbits_activation": 32, "out_qbits": 32,
           "scale": at.score_scale, "in_dtype": at.acc_dtype, **ve},
          reads=[("in", acc)], writes=[("out", sc32)], frees=[acc])
    return sc32


def _probabilities(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int, h: int,
                   s0: int, s: int, sc32: Buf, ve: dict[str, Any],
                   heads: int = 1) -> tuple[Buf, Buf]:
    """(int8 P, its per-row scales) from the scores: masked softmax, row-scaled quantize
    (with `heads` > 1, one row per head, `AttentionTiles.packed_heads`: each head's mask row)."""
    t_len, mask = at.t_len, at.mask
    rows = s * heads
    sm_fields: dict[str, Any] = {"length": t_len, "rows": rows, "qbits_activation": 32,
                                 "out_qbits": 32, **ve}
    reads = [("in", sc32)]
    frees = [sc32]
    if mask is not None:
        isz = ITEMSIZE[mask.dtype]
        bm = lw.buf(pe, rows * t_len * isz, f"{n.id}.mask")
        if mask.dtype != "fp32":  # an fp16 / bf16 export's mask, widened by the tile
            sm_fields.update(bias_qbits=QBITS_OF[mask.dtype], **float_format(mask.dtype))
        for i in range(heads):
            moff = ((b % mask.shape[0]) * mask.strides[0]
                    + ((h + i) % mask.shape[1]) * mask.strides[1] + s0 * mask.strides[2])
            lw.dma(False, pe, bm, mask, moff, s, t_len, mask.strides[2], n.id,
                   buf_offset=i * s * t_len * isz)
        reads.append(("bias", bm))
        frees.append(bm)
    if at.causal:
        sm_fields["causal_offset"] = at.causal_offset + s0
    if at.softcap:  # soft-capped scores (Gemma-2), before the bias as in numerics.attention
        sm_fields["softcap"] = at.softcap
    prob = lw.buf(pe, rows * t_len * 4, f"{n.id}.p")
    lw.op("VE_SOFTMAX_TILE", pe, n.id, sm_fields, reads=reads, writes=[("out", prob)],
          frees=frees)
    # P is quantized with a per-row scale (row max / 127)
    rsc = lw.buf(pe, rows * 4, f"{n.id}.prow")
    lw.op("VE_ROWSCALE_TILE", pe, n.id,
          {"length": t_len, "rows": rows, "qbits_activation": 32, "bits": at.bits_a, **ve},
          reads=[("in", prob)], writes=[("out", rsc)])
    pq = lw.buf(pe, rows * t_len * at.bits_a / 8, f"{n.id}.pq")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": t_len, "rows": rows, "qbits_activation": 32, "out_qbits": at.bits_a,
           "scale": 1.0, "zero_point": 0, **ve},
          reads=[("in", prob), ("row_scale", rsc)], writes=[("out", pq)], frees=[prob])
    return pq, rsc


def _output(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, b: int, h: int,
            s0: int, s: int, p: tuple[Buf, Buf], vq: Buf, last_frees: list[Buf],
            eng: Engines, heads: int = 1) -> None:
    """P·V of the block, dequantized and stored into its rows of the output (with
    `heads` > 1, one row per head, `AttentionTiles.packed_heads`)."""
    pq, rsc = p
    te, ve = eng
    out, dv = at.out, at.v.shape[3]
    rows = s * heads
    oacc = lw.buf(pe, rows * dv * (8 if at.wide else 4), f"{n.id}.oacc")
    lw.op("TE_GEMM_TILE", pe, n.id,
          {"m": rows, "n": dv, "k": at.t_len, "qbits_weight": at.bits_kv,
           "qbits_activation": at.bits_a, **te, **kv_te(at.bits_kv), **at.te_fields()},
          reads=[("ifm", pq), ("wgt", vq)], writes=[("ofm", oacc)], frees=[pq] + last_frees)
    o32 = lw.buf(pe, rows * dv * ITEMSIZE[out.dtype], f"{n.id}.o32")
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": dv, "rows": rows, "qbits_activation": 32, "out_qbits": QBITS_OF[out.dtype],
           "scale": float(np.float32(at.scales[2])), "in_dtype": at.acc_dtype, **ve,
           **float_format(out.dtype)},
          reads=[("in", oacc), ("row_scale", rsc)], writes=[("out", o32)], frees=[oacc, rsc])
    at.store(lw, n, pe, o32, b, h, s0, s, [o32], heads)


def _query_chunks(lw: Lowering, at: AttentionTiles, items: int, b: int,
                  h: int) -> list[tuple[int, int]]:
    """(first row, rows) of the query chunks of one (batch, KV group): enough chunks that
    all PEs get work (each chunk loads its own K and V), and on a spread output none
    crossing a part, so that each chunk runs in the cube holding its rows."""
    s_len = at.q.shape[2]
    out = at.out
    segments = [(0, s_len)]
    if out.parts:
        base = b * out.strides[0] + h * out.strides[1]
        isz = ITEMSIZE[out.dtype]
        part = [out.part_of(out.addr + int((base + s * out.strides[2]) * isz))
                for s in range(s_len)]
        cuts = [0] + [s for s in range(1, s_len) if part[s] != part[s - 1]] + [s_len]
        segments = list(zip(cuts, cuts[1:], strict=False))
    want = max(1, lw.n_pes // max(1, items) // len(segments))
    chunks = []
    for lo, hi in segments:
        n_chunks = max(1, min(want, math.ceil((hi - lo) / at.s_blk)))
        per = math.ceil((hi - lo) / n_chunks)
        chunks += [(s0, min(per, hi - s0)) for s0 in range(lo, hi, per)]
    return chunks


#: a query block of one (batch, KV group): (batch, group, first row, rows)
Block = tuple[int, int, int, int]


def _cube_for(lw: Lowering, at: AttentionTiles, b: int, g: int, out_off: int) -> int | None:
    """The cube of a query chunk (None: any cube): the one holding its output rows when
    the output is spread; else (a decode step: a few query rows) the one holding the
    group's keys when the present cache is spread, so that its K / V loads stay there."""
    if at.out.parts or not at.k.parts:
        return lw.cube_near(at.out, out_off)
    return lw.cube_near(at.k, b * at.k.strides[0] + g * at.k.strides[1])


def _query_runs(lw: Lowering, at: AttentionTiles) -> list[list[Block]]:
    """The query blocks of every (batch, KV group), in runs that each go to one PE.

    A run is one of `_query_chunks`' chunks, cut into blocks of `s_blk` rows. When a
    cube's chunks are fewer than its PEs but its blocks are not, whole blocks are dealt
    out instead: the cube's blocks in order, cut into one run per PE of as equal counts
    as they allow, a run possibly spanning two groups (it then loads the K / V of
    each). gpt2-small at seq 1024 on `base` had 48 chunks of 4 blocks for 64 PEs; dealt
    out, every PE runs 3."""
    bsz, hq = at.q.shape[:2]
    hkv = at.k.shape[1]
    rep = hq // hkv
    out = at.out
    by_cube: dict[int | None, list[list[Block]]] = {}
    for b in range(bsz):
        for g in range(hkv):
            for c0, cn in _query_chunks(lw, at, bsz * hkv, b, g * rep):
                cube = _cube_for(lw, at, b, g, b * out.strides[0] + g * rep * out.strides[1]
                                 + c0 * out.strides[2])
                by_cube.setdefault(cube, []).append(
                    [(b, g, s0, min(at.s_blk, c0 + cn - s0))
                     for s0 in range(c0, c0 + cn, at.s_blk)])
    runs: list[list[Block]] = []
    for cube, chunks in by_cube.items():
        pes = lw.pes_of(cube)
        flat = [blk for chunk in chunks for blk in chunk]
        if len(chunks) >= pes or len(flat) < pes:
            runs += chunks
            continue
        per, extra = divmod(len(flat), pes)
        i = 0
        for r in range(pes):
            take = per + (r < extra)
            runs.append(flat[i:i + take])
            i += take
    return runs


def _pe_for(lw: Lowering, at: AttentionTiles, b: int, g: int, out_off: int) -> int:
    """The next PE of the query chunk's cube (`_cube_for`)."""
    return lw.pes.next(_cube_for(lw, at, b, g, out_off))


def _groups(at: AttentionTiles) -> list[tuple[int, int]]:
    """Every (batch, KV group) of the attention."""
    return [(b, g) for b in range(at.q.shape[0]) for g in range(at.k.shape[1])]


def attention_draws(lw: Lowering, n: LayerIR) -> int | None:
    """The PEs an integer ATTENTION's tiles draw (None: it runs whole): with key ranges,
    one per (batch, KV group) and range (`kv_part_bounds`; the first is the owner's);
    with KV blocks, one per (batch, KV group); else one per query run (`_query_runs`)."""
    if not attention_tiled(lw, n):
        return None
    at = plan_attention(lw, n, planned=True)
    if at.kv_parts > 1:
        return len(_groups(at)) * len(kv_part_bounds(at.t_len, at.kv_parts, at.kv_first))
    if at.kv_block:
        return len(_groups(at))
    return len(_query_runs(lw, at))


def _quantized_output(lw: Lowering, n: LayerIR, at: AttentionTiles) -> QuantOut | None:
    """The output projection's int8 input stored by the attention tiles (`xquant`), when
    the output is (B, S, H, D) in memory, so that a head block's element offsets are its
    offsets in the (B·S, H·D) matrix the GEMM reads (a DMA splits at the parts of
    a spread scratch)."""
    if not heads_as_rows(at.out):
        return None
    return quant_out(lw, n.outputs[0])


def lower_attention(lw: Lowering, n: LayerIR) -> bool:
    if not attention_tiled(lw, n):
        return False
    at = plan_attention(lw, n)
    at = replace(at, q_out=_quantized_output(lw, n, at))
    _tiles(lw, n, at)
    drop_unwritten(lw, at.q_out)
    return True


def _tiles(lw: Lowering, n: LayerIR, at: AttentionTiles) -> None:
    """The attention's tile ops: key ranges, KV blocks or query runs."""
    bsz, hq, s_len, _ = at.q.shape
    hkv = at.k.shape[1]
    rep = hq // hkv
    out = at.out
    if at.kv_parts > 1:  # a few query rows against many keys: key ranges over PEs
        lower_kv_parts(lw, n, at, [(b, g, _pe_for(lw, at, b, g, b * out.strides[0]
                                                  + g * rep * out.strides[1]))
                                   for b, g in _groups(at)])
        return
    if at.kv_block:  # the whole query range against KV blocks, on one PE per group
        for b, g in _groups(at):
            pe = _pe_for(lw, at, b, g, b * out.strides[0] + g * rep * out.strides[1])
            lower_kv_blocks(lw, n, at, pe, b, g)
        return
    pack = at.packed_heads(lw.bank)  # one decision for the layer
    for run in _query_runs(lw, at):
        b0, g0, s00, _ = run[0]
        pe = _pe_for(lw, at, b0, g0, b0 * out.strides[0] + g0 * rep * out.strides[1]
                     + s00 * out.strides[2])
        blocks = 0  # independent query blocks: engines in turn
        for (b, g), piece in groupby(run, key=lambda blk: blk[:2]):
            rows = [blk[2:] for blk in piece]
            kq, vq = _load_kv(lw, n, at, pe, b, g)
            if pack > 1:
                eng = (lw.engines.te(blocks), lw.engines.ve(pe))
                blocks += 1
                s0 = rows[0][0]
                sc32 = _scores(lw, n, at, pe, b, g * rep, s0, 1, kq, eng, pack)
                p = _probabilities(lw, n, at, pe, b, g * rep, s0, 1, sc32, eng[1], pack)
                _output(lw, n, at, pe, b, g * rep, s0, 1, p, vq, [kq, vq], eng, pack)
                continue
            for hh in range(rep):
                h = g * rep + hh
                for i, (s0, s) in enumerate(rows):
                    eng = (lw.engines.te(blocks), lw.engines.ve(pe))
                    blocks += 1
                    sc32 = _scores(lw, n, at, pe, b, h, s0, s, kq, eng)
                    p = _probabilities(lw, n, at, pe, b, h, s0, s, sc32, eng[1])
                    last = hh == rep - 1 and i == len(rows) - 1
                    _output(lw, n, at, pe, b, h, s0, s, p, vq, [kq, vq] if last else [], eng)
