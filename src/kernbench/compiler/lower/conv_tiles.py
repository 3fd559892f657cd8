"""The CONV tiles both convolution lowerings share (`conv` for CONV, `qlinear_conv` for
QLINEAR_CONV): a layer's tiling inputs (`ConvJob`), its OIHW weight at the tiles'
precision (`planned_conv_weight`, asked by the plan pass; `conv_weight` places it), the
activation block loads (`load_x`), the TE_CONV_TILE implicit GEMM tiles with a K loop over
input channels (`dense_tiles`), and the block sizes of both dense and depthwise tiles,
which minimise the busiest PE's estimated time (`window.choose`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.clamp import Bounds
from kernbench.compiler.lower.context import QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.te_weights import STORAGE, per_channel_weights
from kernbench.compiler.lower.values import TeWeight, WeightValues
from kernbench.compiler.lower.window import Geom, choose, halves
from kernbench.compiler.tilegraph import Buf
from kernbench.components.builtin.systolic import systolic_compute_cycles
from kernbench.ir.model import Graph, LayerIR, is_shape_only_array
from kernbench.numerics import quant as qmath

#: cycles charged per command when comparing block sizes (issue, fetch / store latency)
OP_OVERHEAD_CYCLES = 300


@dataclass(frozen=True)
class ConvJob:
    """Everything the tiles of one conv layer need."""

    n: LayerIR
    geo: Geom
    groups: int
    x: Placement                  # NCHW activation as it lies in HBM
    xt: str                       # the dtype the TE reads (int8 / fp16 / bf16 / fp32)
    sx: float | None              # the activation's static scale (int mode)
    w: TeWeight
    out: Placement                # NCHW output (the fused clamp's output when fused)
    scale: Placement | None       # fp32 [C_out] per-channel weight scales (int mode)
    bias: Placement | None        # fp32 [C_out]
    clamp: Bounds | None

    @property
    def cout(self) -> int:
        return int(self.out.shape[1])

    @property
    def integer(self) -> bool:
        return self.xt == "int8"

    @property
    def blocking(self) -> ConvBlocking:
        return ConvBlocking(self.geo, self.groups, self.cout, self.x.dtype, self.xt,
                            self.w.dtype)


class ConvBlocking(NamedTuple):
    """What a conv's block sizes depend on: the geometry, the groups, the output
    channels, the activation's dtype in HBM and as the TE reads it, the weight's dtype."""

    geo: Geom
    groups: int
    cout: int
    x_dtype: str
    xt: str
    w_dtype: str

    @property
    def depthwise(self) -> bool:
        return self.geo.c // self.groups == 1


@lru_cache(maxsize=4096)
def _cycles(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> int:
    return systolic_compute_cycles(m, n, k, rows, cols, dataflow)


def conv_weight(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The OIHW weight at the tiles' precision (its scale per output channel in int mode),
    from the lowering plan (`planned_conv_weight`), placed in HBM by the first layer that
    reads it; None when it cannot be tiled (int4, zero points, a non-channel quantization
    axis)."""
    wt = lw.lowering_plan.te_weight((w_tid, f"conv:{mode}", n.qbits_weight))
    if wt is None or wt.values is None:
        return wt
    v = wt.values
    p = lw.const(v.key, v.data, v.dtype, source=v.source, shape=v.shape)
    return TeWeight(p, wt.scale, wt.bits)


def planned_conv_weight(g: Graph, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The conv weight's values at the tiles' precision and its scale, not yet placed
    (`conv_weight` places them); None when it cannot be tiled. The plan pass asks once per
    (weight, mode, bits)."""
    w = np.asarray(g.weights[w_tid])
    shape = tuple(int(d) for d in w.shape)
    if mode == "int":
        if n.qbits_weight not in (8, None):
            return None
        q = g.tensors[w_tid].quant
        if is_shape_only_array(w):
            if q is not None:
                return None
            return TeWeight(None, np.ones((shape[0],), np.float32), 8,
                            values=WeightValues(f"{w_tid}@conv_int8", None, "int8", shape,
                                                w_tid))
        if q is not None:  # imported integer weight: used as it is
            zp = g.weights.get(q.zero_point) if q.zero_point else None
            if q.block_size or q.dtype != "int8" or q.axis not in (0, None) \
                    or (zp is not None and np.any(np.asarray(zp) != 0)):
                return None
            wq, sw = w.astype(np.int8), np.asarray(g.weights[q.scale], np.float32)
        else:
            wq, sw = qmath.quantize_weight(w.astype(np.float32), 8,
                                           0 if per_channel_weights(g) else None)
        sw = np.broadcast_to(np.asarray(sw, np.float32).reshape(-1), (shape[0],))
        return TeWeight(None, np.ascontiguousarray(sw, np.float32), 8,
                        values=WeightValues(f"{w_tid}@conv_int8", np.asarray(wq, np.int8),
                                            "int8", shape, w_tid))
    if isinstance(n.qbits_weight, int):
        return None  # integer weights under float activations: not a conv tile mode
    dt, bits = (mode, 16) if mode in STORAGE else ("fp32", 32)
    if is_shape_only_array(w):
        return TeWeight(None, None, bits,
                        values=WeightValues(f"{w_tid}@{dt}", None, dt, shape, w_tid))
    arr = w.astype(np.float32)
    if mode in STORAGE:
        arr = qmath.round_to_float(arr, mode).astype(STORAGE[mode])
    return TeWeight(None, None, bits, values=WeightValues(f"{w_tid}@{dt}", arr, dt, shape, w_tid))


def load_x(lw: Lowering, job: ConvJob, pe: int, img: int, ci0: int, c: int, first: int,
            rows: int) -> Buf:
    """DMA `c` input channels from `ci0`, input rows [first, first + rows), full width,
    and bring them to the TE's dtype in TCM (quantize / cast) when HBM holds fp32."""
    geo, nid = job.geo, job.n.id
    count = c * rows * geo.w
    bx = lw.buf(pe, count * ITEMSIZE[job.x.dtype], f"{nid}.ifm")
    hw = geo.h * geo.w
    lw.dma(False, pe, bx, job.x, (img * geo.c + ci0) * hw + first * geo.w, c, rows * geo.w,
           hw, nid)
    if job.x.dtype == job.xt:
        return bx
    bq = lw.buf(pe, count * ITEMSIZE[job.xt], f"{nid}.ifmq")
    fields = {"length": count, "rows": 1, "qbits_activation": QBITS_OF[job.x.dtype],
              "out_qbits": QBITS_OF[job.xt], **float_format(job.x.dtype, job.xt)}
    if job.integer:
        lw.op("VE_QUANTIZE_TILE", pe, nid, dict(fields, scale=job.sx, zero_point=0),
              reads=[("in", bx)], writes=[("out", bq)], frees=[bx])
    else:
        lw.op("VE_COPY_TILE", pe, nid, fields, reads=[("in", bx)], writes=[("out", bq)],
              frees=[bx])
    return bq


def _dense_blocks(lw: Lowering, job: ConvBlocking) -> tuple[int, ...]:
    """(output channels, output rows, input channels per K step) of a TE tile."""
    geo, gs = job.geo, lw.gemm_spec
    cg, og = geo.c // job.groups, job.cout // job.groups
    ab, wb = ITEMSIZE[job.x_dtype] + ITEMSIZE[job.xt], ITEMSIZE[job.w_dtype]
    taps = geo.kh * geo.kw
    cobs = sorted({min(og, v) for v in (256, 128, 64, 32)}, reverse=True)
    ccs = sorted({min(cg, v) for v in (cg, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1)},
                 reverse=True)

    def rows_in(t: int) -> int:
        return min(geo.h, (t - 1) * geo.strides[0] + (geo.kh - 1) * geo.dils[0] + 1)

    def fits(cob: int, t: int, cc: int) -> bool:
        acc = cob * t * geo.wo * 4
        ifm = math.ceil(cc * rows_in(t) * geo.w * ab)
        wgt = math.ceil(cob * cc * taps * wb)
        return max(acc, ifm, wgt) <= lw.bank and 2 * (acc + ifm + wgt) <= lw.tcm_bytes

    def cost(cob: int, t: int, cc: int) -> float:
        steps = math.ceil(cg / cc)
        return steps * (_cycles(t * geo.wo, cob, cc * taps, gs.rows, gs.cols, gs.dataflow)
                        + OP_OVERHEAD_CYCLES) + OP_OVERHEAD_CYCLES

    def tiles(cob: int, t: int, cc: int) -> int:
        return geo.n * job.groups * math.ceil(og / cob) * math.ceil(geo.ho / t)

    cands = [(cob, t, cc) for cob in cobs for t in halves(geo.ho) for cc in ccs]
    return choose(cands, fits, cost, tiles, lw.n_pes)


def dense_tiles(lw: Lowering, job: ConvJob, qa: int, w_bits: int, w_itemsize: float,
                epilogue: Callable[[int, Buf, int, int, int, int, int], None], *,
                x_fields: dict[str, Any] | None = None,
                bias: Callable[[int, int, int], list[tuple[str, Buf]]] | None = None) -> None:
    """TE_CONV_TILE tiles: (image, group, channel block, row block), K over channels into
    one accumulator; then `epilogue(pe, acc, img, co0, cob, oh0, rows)`. `bias(pe, co0,
    cob)`: extra operands of the first K step (QLinearConv's int32 bias); `x_fields`:
    extra TE_CONV_TILE fields (the input's signedness)."""
    geo, nid, w = job.geo, job.n.id, job.w
    cg = geo.c // job.groups
    cc = _dense_blocks(lw, job.blocking)[2]
    taps = geo.kh * geo.kw
    for img, grp, cob, co0, oh0, t in dense_units(lw, job.blocking):
        rb = geo.rows_for(oh0, t)
        pe = lw.next_pe()
        acc = lw.buf(pe, cob * t * geo.wo * 4, f"{nid}.acc")
        for i, c0 in enumerate(range(0, cg, cc)):
            c = min(cc, cg - c0)
            bx = load_x(lw, job, pe, img, grp * cg + c0, c, rb.first, rb.rows)
            bw = lw.buf(pe, math.ceil(cob * c * taps * w_itemsize), f"{nid}.wgt")
            lw.dma(False, pe, bw, w.placement, (co0 * cg + c0) * taps, cob,
                   c * taps, cg * taps, nid, role="weight")
            extra = bias(pe, co0, cob) if bias is not None and i == 0 else []
            fields = {"n": 1, "c_in": c, "c_out": cob, "layout": "nchw",
                      **geo.window_fields(rb), "qbits_weight": w_bits,
                      "qbits_activation": qa, "ofm_qbits": 32,
                      "accumulate": i > 0, **float_format(job.xt),
                      **(x_fields or {})}
            lw.op("TE_CONV_TILE", pe, nid, fields,
                  reads=[("ifm", bx), ("wgt", bw)] + extra
                  + ([("ofm", acc)] if i else []),
                  writes=[("ofm", acc)], frees=[bx, bw] + [b for _, b in extra])
        epilogue(pe, acc, img, co0, cob, oh0, t)


def _dw_blocks(lw: Lowering, job: ConvBlocking) -> tuple[int, ...]:
    """(input channels, output rows) of a depthwise tile."""
    geo = job.geo
    mult = job.cout // geo.c
    ab = ITEMSIZE[job.x_dtype] + ITEMSIZE[job.xt]
    lanes = lw.state.topology.config.cube.pe_template.pe_math.lanes
    mul = lw.math_op_cycles["mul"]

    def fits(cb: int, t: int) -> bool:
        rows = min(geo.h, (t - 1) * geo.strides[0] + (geo.kh - 1) * geo.dils[0] + 1)
        return max(cb * rows * geo.w * ab, cb * mult * t * geo.wo * 4) <= lw.bank

    def cost(cb: int, t: int) -> float:
        taps = cb * mult * t * geo.wo * geo.kh * geo.kw
        return math.ceil(taps / lanes) * mul + 2 * OP_OVERHEAD_CYCLES

    def tiles(cb: int, t: int) -> int:
        return geo.n * math.ceil(geo.c / cb) * math.ceil(geo.ho / t)

    cands = [(cb, t) for cb in halves(geo.c) for t in halves(geo.ho)]
    return choose(cands, fits, cost, tiles, lw.n_pes)


def dense_units(lw: Lowering, blk: ConvBlocking) -> list[tuple[int, int, int, int, int, int]]:
    """(image, group, output channels, first output channel, first output row, rows) of
    each TE_CONV_TILE block (`dense_tiles`; each draws a PE)."""
    geo = blk.geo
    og = blk.cout // blk.groups
    cob_max, toh, _ = _dense_blocks(lw, blk)
    return [(img, grp, min(cob_max, og - cb), grp * og + cb, oh0, min(toh, geo.ho - oh0))
            for img in range(geo.n) for grp in range(blk.groups)
            for cb in range(0, og, cob_max) for oh0 in range(0, geo.ho, toh)]


def dw_units(lw: Lowering, blk: ConvBlocking) -> list[tuple[int, int, int, int, int]]:
    """(image, first channel, channels, first output row, rows) of each VE_DWCONV_TILE
    block of a depthwise conv (each draws a PE)."""
    geo = blk.geo
    cb_max, toh = _dw_blocks(lw, blk)
    return [(img, ci0, min(cb_max, geo.c - ci0), oh0, min(toh, geo.ho - oh0))
            for img in range(geo.n) for ci0 in range(0, geo.c, cb_max)
            for oh0 in range(0, geo.ho, toh)]


def conv_units(lw: Lowering, blk: ConvBlocking) -> int:
    """The blocks a conv (or QLinearConv) tiles into, one PE drawn each: depthwise
    (`dw_units`) or dense (`dense_units`)."""
    return len(dw_units(lw, blk) if blk.depthwise else dense_units(lw, blk))
