"""GEMM and QKV_PROJ: array-aligned output tiles with a K loop and an epilogue.

The activation is first made what the tensor engine reads, once per (tensor, format)
however many layers read it: quantized (VE_QUANTIZE, static scale) or cast (VE_COPY to
fp16) into an HBM scratch, or read as it is (fp32 mode, fp16 already, int8 data behind a
per-tensor DEQUANTIZE). The weight is stored at its own bits (int8, int4 packed, fp16,
fp32) once per (weight, mode, bits), as column panels as wide as the output tiles so
that a weight tile is one contiguous DMA (`te_weights`). Output tiles
(tm × tn, `kernbench.compiler.tiling`) go round-robin over PEs; on each PE two tiles' K
loops interleave (DMA A, DMA W, TE_GEMM accumulating), so one tile's fetch, store and
command round trip hide behind the other's compute; then the epilogue VE_DEQUANTIZE
(per-column scale s_x·s_w, bias) runs in place and a 2-D DMA stores the tile. An integer
GEMM whose tiles cannot fill the PEs may split each tile's K steps over several PEs
(`GemmTiles.ks`): helpers store int32 partial sums into an HBM scratch, the
owner adds them (VE_ELEMENTWISE_TILE add, exact in int32) before its epilogue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower import gemm_balance, gemm_rowreduce, gemm_splitk
from kernbench.compiler.lower.context import FLOAT_DTYPES, QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.epilogue import apply_step, drop_fused, residual_of
from kernbench.compiler.lower.gemm_balance import (
    KPart,
    OutTile,
    Producer,
)
from kernbench.compiler.lower.gemm_cubes import gemm_ranges, spread_scratch
from kernbench.compiler.lower.gemm_parts import (
    acc_itemsize,
    range_parts,
    range_tiles,
    tcm_dtype,
    tcm_itemsize,
)
from kernbench.compiler.lower.gemm_rowreduce import RowReduce
from kernbench.compiler.lower.kv_rows import KvRows, kv_rows_out, store_kv_rows
from kernbench.compiler.lower.te_weights import (
    CHUNKED_MAX_ROWS,
    panel_width,
    te_weight,
    weight_tile,
)
from kernbench.compiler.lower.values import FusedStep, PreparedX, TeWeight
from kernbench.compiler.lower.weight_home import place_by_use
from kernbench.compiler.lower.xquant import (
    QuantOut,
    drop_unwritten,
    kv_quant_out,
    quant_out,
    store_tile,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.compiler.tiling import GemmTiles
from kernbench.ir.model import LayerIR

#: the accumulator an epilogue reads, by TE mode: int32, or int64 for a 16-bit integer
#: operand; float modes accumulate in fp32
ACC_DTYPE = {"int": "int32", "int16": "int64"}


class DynamicGemm(NamedTuple):
    """What a GEMM on a run-time-quantized activation takes instead of the static path
   : the stored weight, the zero-point column term computed at run time
    (int32 [N]) and the run-time scale s_x·s_w (one fp32 value)."""

    weight: TeWeight
    corr: Placement
    scale: Placement


@dataclass
class LastGemm:
    """The GEMM tiled last: when each PE has its columns (`gemm_balance.Producer`), read
    by the next GEMM's split-K parts placed by readiness. It depends on that GEMM's tiles,
    so `gemm` keeps it as its own state (`Lowering.local`), read by no other module."""

    producer: Producer | None = None


# ----------------------------------------------------------------------------- tiles


def _epilogue_consts(lw: Lowering, n: LayerIR, sx: np.ndarray | None, sw: np.ndarray | None,
                     b_tid: str | None, out_tid: str, nn: int,
                     mode: str) -> Placement:
    """Epilogue constants: the scale vector (s_x·s_w, ones for float modes), fp32 [N], or
    with a bias [2, N]: the scale and bias rows, so that one DMA per tile loads both."""
    if mode in ("int", "int16"):
        sw_b = sw.reshape(()) if sw.ndim == 0 or sw.size == 1 else sw.reshape(-1)
        scale = (np.asarray(sx, np.float32) * sw_b).astype(np.float32)
        scale = np.broadcast_to(scale, (nn,)).astype(np.float32)
    else:
        scale = np.ones((nn,), np.float32)
    if b_tid:
        bias = np.asarray(lw.g.weights[b_tid], np.float32).reshape(-1)
        both = np.stack([scale, np.broadcast_to(bias, (nn,))]).astype(np.float32)
        return lw.const(f"{n.id}:{out_tid}@scale_bias", both, "fp32", source=b_tid)
    return lw.const(f"{n.id}:{out_tid}@scale", scale, "fp32")


def _tiles_per_pe(lw: Lowering, xq: Placement, wp: TeWeight, op: Placement, m: int, nn: int,
                  k: int, nn_layer: int, producer: Producer | None = None,
                  row_reduce: bool = False) -> dict[int, tuple[GemmTiles, list[KPart]]]:
    """Output tiles round-robin over PEs: over all PEs, or, for a spread output, each part's
    rows over the PEs of its cube (tiles chosen per part; `gemm_ranges`). `nn_layer`: the layer's output
    columns (`wide` decides for the whole layer). With split K every part of a tile takes
    the next PE of the same cube range; the first part owns the tile. `producer`: the GEMM
    that just computed this one's K columns; a split-K layer of one row tile over every
    PE then sizes its parts by when PEs and K steps are ready, when that is estimated to
    end sooner (`gemm_balance`) and, with `row_reduce`, keeps the reduction possible.
    `row_reduce`: one PE will add the partial sums up (the lowering plan's `norms`), so an
    unsplit one-row tiling may be split for it (`gemm_parts.range_tiles`)."""
    per_pe: dict[int, tuple[GemmTiles, list[KPart]]] = {}
    ranges = gemm_ranges(lw, xq.dtype, wp, op, m, nn, k, nn_layer)
    for r_lo, r_hi, cube in ranges:
        t = range_tiles(lw, xq.dtype, wp.dtype, wp.bits, r_hi - r_lo, nn, k, cube, row_reduce)
        mine: dict[int, tuple[GemmTiles, list[KPart]]] = {}
        for tile, i, k0, k1 in range_parts(t, r_lo, r_hi, nn, k):
            mine.setdefault(lw.pes.next(cube), (t, []))[1].append(KPart(tile, k0, k1, i - 1))
        if producer is not None and gemm_balance.BALANCE and t.ks > 1 and cube is None \
                and r_hi - r_lo <= t.tm:
            mine = gemm_splitk.balanced(lw, t, mine, k, wp.bits, producer,
                                        reduce_cols=nn if row_reduce else 0)
        for pe, (tt, parts) in mine.items():
            per_pe.setdefault(pe, (tt, []))[1].extend(parts)
    return per_pe


def _zp_correction(lw: Lowering, n: LayerIR, x: PreparedX, wp: TeWeight,
                   out_tid: str) -> Placement | None:
    """The activation zero point's column term, int32 [N]: -z_x · Σ_k w_q[k, c] (what
    Σ_k (x_q - z_x)·w_q adds to the plain integer product), or None when z_x = 0. The
    first K step of every tile adds it as the TE's bias, so the accumulator holds the
    exact zero-point-corrected sum."""
    if not x.zero_point:
        return None
    colsum = wp.column_sums()
    if colsum is None:
        raise ValueError(f"{n.id}: a zero-point activation needs the weight's values")
    corr = (-int(x.zero_point) * colsum).astype(np.int32)
    return lw.const(f"{n.id}:{out_tid}@zpcorr", corr, "int32")


def _k_loops(lw: Lowering, n: LayerIR, pe: int, group: list[OutTile], accs: list[Buf],
             xq: Placement, wp: TeWeight, t: GemmTiles, k: int, nn: int,
             a_res: list[Buf] | None = None, free_a: bool = False,
             corr: Placement | None = None, te_base: int = 0,
             k_range: tuple[int, int] | None = None) -> None:
    """The interleaved K loops of a group of output tiles on one PE, over the K steps of
    `k_range` (all of K by default). With `a_res` (the group's rows of A already in TCM,
    one buffer per K step) only W is loaded; the last group of those rows frees them
    (`free_a`). `corr` (int32 [N], the zero-point column term) is the bias of the step
    at K = 0. The j-th tile of the group runs on tensor engine j mod count (its whole K
    loop: the partial sums stay on that engine)."""
    ab, wb = ITEMSIZE[xq.dtype], tcm_itemsize(wp.dtype)
    qa_bits = {"int8": 8, "uint8": 8, "int4": 4, "int16": 16, "fp16": 16, "bf16": 16,
               "fp32": 32}[xq.dtype]
    # a uint8 activation (QLinearMatMul) is read unsigned by the TE; a 16-bit integer
    # operand is int16 and accumulates in int64
    unsigned = {"ifm_signed": False} if xq.dtype == "uint8" else {}
    wide = {"int16": True, "ofm_qbits": 64} if "int16" in (xq.dtype, wp.dtype) \
        else {"ofm_qbits": 32}
    k_lo, k_hi = k_range or (0, k)
    panel = panel_width(wp, t.tn)
    for i, k0 in enumerate(range(k_lo, k_hi, t.tk)):
        tk = min(t.tk, k_hi - k0)
        for j, ((m0, n0, tm, tn), c) in enumerate(zip(group, accs, strict=True)):
            if a_res is None:
                ba = lw.buf(pe, tm * tk * ab, f"{n.id}.a")
                lw.dma(False, pe, ba, xq, m0 * k + k0, tm, tk, k, n.id)
                a_frees = [ba]
            else:
                ba = a_res[i]
                a_frees = [ba] if free_a and j == len(group) - 1 else []
            bw = lw.buf(pe, tk * tn * wb, f"{n.id}.w")
            weight_tile(lw, pe, bw, wp, n.id, (k0, tk), (n0, tn), panel,
                        chunked=xq.shape[0] <= CHUNKED_MAX_ROWS)
            reads = [("ifm", ba), ("wgt", bw)] + ([("ofm", c)] if i else [])
            frees = a_frees + [bw]
            if corr is not None and k0 == 0:
                bc = lw.buf(pe, tn * 4, f"{n.id}.zpcorr")
                lw.dma(False, pe, bc, corr, n0, 1, tn, tn, n.id, role="weight")
                reads.append(("bias", bc))
                frees.append(bc)
            lw.op("TE_GEMM_TILE", pe, n.id,
                  {"m": tm, "n": tn, "k": tk, "qbits_weight": wp.bits,
                   "qbits_activation": qa_bits, **wide, "accumulate": i > 0,
                   **unsigned, **float_format(xq.dtype, tcm_dtype(wp.dtype)),
                   **lw.engines.te(te_base + j)},
                  reads=reads, writes=[("ofm", c)], frees=frees)


def _resident_a(lw: Lowering, n: LayerIR, pe: int, xq: Placement, t: GemmTiles, k: int,
                m0: int, tm: int, tiles: int,
                k_range: tuple[int, int] | None = None) -> list[Buf] | None:
    """A PE with several output tiles of the same rows (and K range) loads those rows of A
    once (one buffer per K step) when they fit beside the double-buffered W and
    accumulators."""
    ab = ITEMSIZE[xq.dtype]
    acc = 8 if xq.dtype == "int16" else 4
    k_lo, k_hi = k_range or (0, k)
    a_bytes = tm * (k_hi - k_lo) * ab
    if tiles < 2 or a_bytes + 2 * (t.tk * t.tn * 4 + tm * t.tn * acc) > lw.tcm_bytes:
        return None
    out = []
    for k0 in range(k_lo, k_hi, t.tk):
        tk = min(t.tk, k_hi - k0)
        ba = lw.buf(pe, tm * tk * ab, f"{n.id}.a")
        lw.dma(False, pe, ba, xq, m0 * k + k0, tm, tk, k, n.id)
        out.append(ba)
    return out


def gemm_tiles(lw: Lowering, n: LayerIR, per_pe: dict[int, tuple[GemmTiles, list[KPart]]],
               xq: Placement, wp: TeWeight, k: int, nn: int, corr: Placement | None,
               finish: Callable[[int, OutTile, Buf], None], spread: bool = False,
               reducer: RowReduce | None = None) -> None:
    """The output tiles `per_pe` (`_tiles_per_pe`) through their K loops, each PE's tiles
    row by row; `finish(pe, tile, acc)` then writes an accumulator out (the GEMM's
    epilogue, QLinearMatMul's requantize); with split K, after the owner has added the
    helpers' partial sums (in a later phase). `spread`:
    the output is spread over the cubes (so is the split-K scratch). With a `reducer`
    every part stores its partial sum for it instead (`gemm_rowreduce`)."""
    place_by_use(lw, wp, per_pe)
    scratch = gemm_splitk.partials(lw, n, per_pe, xq.shape[0], nn, spread) \
        if reducer is None else reducer.scratch
    owner_cube = {p.tile: lw.topo.pes[pe].cube.index for pe, (_, parts) in per_pe.items()
                  for p in parts if p.slot < 0}
    deferred: list[tuple[int, int, KPart, Buf]] = []  # owners awaiting (pe, ks, part, acc)
    for pe in sorted(per_pe):
        t, parts = per_pe[pe]
        by_rows: dict[tuple[int, int, int], list[KPart]] = {}
        # a PE's helper parts first: the partial sums other PEs wait for (parts placed by
        # readiness, run in the order they were dealt)
        balanced = any(p.parts for p in parts)
        for part in parts if balanced else sorted(parts, key=lambda p: p.slot < 0):
            by_rows.setdefault((part.tile[0], part.k0, part.k1), []).append(part)
        started = 0  # accumulators begun on this PE: they take its tensor engines in turn
        for (m0, k0, k1), row_parts in by_rows.items():
            started = _row_parts(lw, n, pe, t, row_parts, xq, wp, k, nn, corr, scratch,
                                 finish, started, m0, (k0, k1), deferred, owner_cube,
                                 reducer)
    if deferred:
        # the owners add the partial sums in a phase of their own: their loads come after
        # every helper's store in program order, which the schedule derives HBM
        # dependencies from, and no K loop waits behind a wait for a partial sum
        lw.phase()
        assert scratch is not None
        for pe, ks, part, c in deferred:
            finish(pe, part.tile, gemm_splitk.add_partials(lw, n, pe, c, part, ks, scratch, nn))


def _row_parts(lw: Lowering, n: LayerIR, pe: int, t: GemmTiles, row_parts: list[KPart],
               xq: Placement, wp: TeWeight, k: int, nn: int, corr: Placement | None,
               scratch: Placement | None, finish: Callable[[int, OutTile, Buf], None],
               started: int, m0: int, k_range: tuple[int, int],
               deferred: list[tuple[int, int, KPart, Buf]],
               owner_cube: dict[OutTile, int], reducer: RowReduce | None = None) -> int:
    """One PE's parts of the same rows and K range, two accumulators per tensor engine
    interleaving their K loops (one hides the other's fetch, store and command round
    trip; a single K step needs no partner). A helper stores its partial sum, an owner
    with partial sums to add goes to `deferred`, any other tile is finished. Returns the
    accumulators begun on the PE so far."""
    width = (2 if len(range(*k_range, t.tk)) > 1 else 1) * lw.engines.te_count
    a_res = _resident_a(lw, n, pe, xq, t, k, m0, row_parts[0].tile[2], len(row_parts),
                        k_range)
    for g0 in range(0, len(row_parts), width):
        group = row_parts[g0:g0 + width]
        accs = [lw.buf(pe, p.tile[2] * p.tile[3] * acc_itemsize(xq.dtype, wp.dtype),
                       f"{n.id}.acc")
                for p in group]
        _k_loops(lw, n, pe, [p.tile for p in group], accs, xq, wp, t, k, nn, a_res,
                 free_a=g0 + width >= len(row_parts), corr=corr, te_base=started,
                 k_range=k_range)
        started += len(group)
        for part, c in zip(group, accs, strict=True):
            if reducer is not None:
                gemm_rowreduce.store_part(lw, n, pe, c, t, part, reducer, nn)
            elif part.slot >= 0:
                assert scratch is not None
                gemm_splitk.store_partial(lw, n, pe, c, part, scratch, nn, owner_cube[part.tile])
            elif part.count(t.ks) > 1:
                deferred.append((pe, part.count(t.ks), part, c))
            else:
                finish(pe, part.tile, c)
    return started


def _epilogue(lw: Lowering, n: LayerIR, pe: int, c: Buf, sp: Placement,
              op: Placement, tile: OutTile, nn: int, mode: str,
              step: FusedStep | None, q: QuantOut | KvRows | None = None,
              runtime_scale: bool = False,
              then: Callable[[Buf, dict], None] | None = None,
              engine: dict | None = None, residual: Placement | None = None) -> None:
    """Scale (and bias) the accumulator tile into the output dtype, apply a fused
    consumer (`kernbench.compiler.lower.epilogue`) and store it; with `q`, also store the
    consumer's result quantized for the integer GEMMs that read it (`xquant`); without a
    fused consumer, `q` is the int8 K / V an attention reads (`xquant.kv_quant_out`) or
    the new rows of a KV cache (`kv_rows.KvRows`: stored there instead of the output).
    `runtime_scale`: the scale placement is one fp32 value computed at run time,
    not a vector. `then(c, engine)`: more vector work on the fused step's
    result before it is stored (`gemm_rowreduce.norm`); `engine`: the vector engine (by
    default the PE's next); `residual`: where a fused ADD's residual lives."""
    m0, n0, tm, tn = tile
    # a [2, N] constant holds the scale and the bias rows: one DMA loads both
    packed = not runtime_scale and len(sp.shape) == 2
    if runtime_scale:
        bs = lw.buf(pe, 4, f"{n.id}.scale")
        lw.dma(False, pe, bs, sp, 0, 1, 1, 1, n.id)
        reads = [("in", c), ("scale_in", bs)]
    else:
        rows = 2 if packed else 1
        bs = lw.buf(pe, rows * tn * 4, f"{n.id}.scale")
        lw.dma(False, pe, bs, sp, n0, rows, tn, nn, n.id, role="weight")
        reads = [("in", c), ("scale", bs)] + ([("bias", bs)] if packed else [])
    frees = [c, bs]
    engine = engine or lw.engines.ve(pe)
    # in place: the result overwrites the accumulator it is computed from
    deq = lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
                {"length": tn, "rows": tm, "qbits_activation": 32,
                 "out_qbits": QBITS_OF[op.dtype],
                 "in_dtype": ACC_DTYPE.get(mode, "float32"), **engine,
                 **float_format(op.dtype)},
                reads=reads, writes=[("out", c)], frees=frees[1:])
    if packed:
        deq.role_offset = {"bias": tn * 4}
    if isinstance(q, KvRows):  # the new rows of a KV cache (`kv_rows`)
        store_kv_rows(lw, q, pe, c, n.id, m0 * nn + n0, tm, tn, nn, engine, [c])
        return
    if step is None:  # with the attention's int8 K / V (`xquant.kv_quant_out`)
        store_tile(lw, q, pe, c, op, n.id, m0 * nn + n0, tm, tn, nn, engine, [c])
        return
    apply_step(lw, step, pe, c, tile, nn, n.id, engine, residual)
    if then is not None:
        then(c, engine)
    # with the next GEMM's int8 activation first (its chain)
    for o in store_tile(lw, q, pe, c, step.out, step.layer.id, m0 * nn + n0, tm, tn, nn,
                        engine, [c]):
        o.fused_into = n.id


def gemm(lw: Lowering, n: LayerIR, x: PreparedX, w_tid: str, b_tid: str | None,
         out_tid: str, mode: str, nn_layer: int | None = None,
         dyn: DynamicGemm | None = None) -> bool:
    """Tile out = x · w (+ b); False when the weight or the output cannot be tiled.
    The output's element-wise consumer the lowering plan names (`epilogue.planned_epilogue`) is
    applied in the epilogue;
    `nn_layer`: the layer's output columns when it has several weights (QKV_PROJ). `dyn`:
    a GEMM whose activation was quantized at run time (MatMulInteger): its
    weight, zero-point term and scale come from there."""
    wp = te_weight(lw, n, w_tid, mode) if dyn is None else dyn.weight
    if wp is None:
        return False
    xq, sx = x.placement, x.scale
    corr = _zp_correction(lw, n, x, wp, out_tid) if dyn is None else dyn.corr
    k, nn = wp.shape
    m = xq.shape[0]
    op = lw.plan.placements[out_tid]
    if not op.contiguous or op.dtype not in FLOAT_DTYPES \
            or int(np.prod(op.shape)) != m * nn:
        return False
    step = lw.lowering_plan.epilogue.get(n.id)
    residual = residual_of(lw, step)
    q = quant_out(lw, step.layer.outputs[0]) if step is not None else \
        kv_quant_out(lw, out_tid) if mode == "int" else None
    kv = kv_rows_out(lw, out_tid) if step is None and q is None else None
    consts = _epilogue_consts(lw, n, sx, wp.scale, b_tid, out_tid, nn, mode) \
        if dyn is None else dyn.scale
    last_gemm = lw.local(LastGemm)
    last = last_gemm.producer
    # the norm after the epilogue and whether this GEMM's tiles run it (the plan's `norms`)
    after = lw.lowering_plan.norms.get(n.id)
    norm = gemm_rowreduce.norm_of(lw, after) if after is not None else None
    reduced = after is not None and after.reduced
    per_pe = _tiles_per_pe(lw, xq, wp, op, m, nn, k, nn_layer or nn,
                           last if last is not None and xq.key in last.tensors else None,
                           reduced)
    # what a consumer reads of this GEMM's tiles as they are stored: the quantized copy
    # its epilogue writes, else the output itself
    last_gemm.producer = gemm_splitk.as_producer(lw, per_pe, k, wp.bits,
                                 {q.scratch.key} if isinstance(q, QuantOut) else {op.key})
    rr = gemm_rowreduce.plan(lw, n, step, nn, per_pe, norm) \
        if reduced and step is not None and norm is not None else None
    gemm_tiles(lw, n, per_pe, xq, wp, k, nn, corr,
               lambda pe, tile, c: _epilogue(lw, n, pe, c, consts, op, tile, nn, mode, step,
                                             q or kv, runtime_scale=dyn is not None,
                                             residual=residual),
               spread=spread_scratch(gemm_ranges(lw, xq.dtype, wp, op, m, nn, k,
                                                 nn_layer or nn)),
               reducer=rr)
    if rr is not None:  # one PE adds the row up, runs the epilogue and the norm
        engine = lw.engines.ve(rr.pe)
        c = gemm_rowreduce.sum_row(lw, n, rr, nn, engine)
        _epilogue(lw, n, rr.pe, c, consts, op, (0, 0, 1, nn), nn, mode, step,
                  then=lambda c, eng: gemm_rowreduce.norm(lw, rr, c, n.id, eng), engine=engine,
                  residual=residual)
        gemm_rowreduce.done(lw, rr)
    if step is not None:
        drop_fused(lw, n, out_tid, step)
    drop_unwritten(lw, q or kv)
    return True
