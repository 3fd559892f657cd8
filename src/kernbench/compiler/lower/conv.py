"""CONV (1-D and 2-D, any stride / padding / dilation / groups) as tiles on every PE.

Dense and grouped convolutions run on the tensor engine as TE_CONV_TILE implicit GEMMs in
NCHW (layout "nchw": the activation and the OIHW weight are read as they lie in HBM, with
2-D strided DMAs over channels); depthwise ones (one input channel per group) run on the
vector engine as VE_DWCONV_TILE, where they cost outputs × taps lane operations instead of
one systolic pass per channel.

Precision follows the GEMM (`gemm.te_mode`): "int" quantizes the activation with its
calibrated static scale (in each tile, after its load) and the weight per output channel,
and the tiles accumulate exactly in int32; "fp16" / "bf16" / "fp32" accumulate in fp32. A tile is a block
of output channels (within one group) × a block of output rows (full width) of one image:
its K loop walks the group's input channels (accumulating), then the epilogue —
VE_DEQUANTIZE_TILE with a per-row (= per-channel) scale s_x·s_w and bias, and the ReLU /
Clip the lowering plan has it apply (`conv_plan.planned_clamp`) — runs in
place in TCM and one 2-D DMA stores the block. Tiles go round-robin over the PEs; block
sizes minimise the busiest PE's estimated time (`conv_tiles`).
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.activation import prepare_x
from kernbench.compiler.lower.clamp import clamp_bounds, clip_fields
from kernbench.compiler.lower.context import QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.conv_plan import (
    conv_shape,
    conv_tiled,
    dequantized_int8,
    float_activation,
)
from kernbench.compiler.lower.conv_tiles import (
    ConvJob,
    conv_weight,
    dense_tiles,
    dw_units,
    load_x,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR


def _job(lw: Lowering, n: LayerIR) -> ConvJob | None:
    """The layer's tiling inputs, or None when it must run whole (`conv_plan`)."""
    shape = conv_shape(lw, n)
    if shape is None:
        return None
    mode, geo, groups, xp0, yp = shape
    w_shape = list(lw.g.tensors[n.inputs[1]].shape)
    wt = conv_weight(lw, n, n.inputs[1], mode)
    if wt is None:
        return None
    xin = _activation(lw, n, mode)
    if xin is None:
        return None
    px, xt, sx = xin
    shape4 = (geo.n, geo.c, geo.h, geo.w)
    x = px.view(shape4)
    clamp = lw.lowering_plan.clamps.get(n.id)
    bounds = clamp_bounds(lw, lw.g.node(clamp)) if clamp is not None else None
    out = lw.plan.placements[lw.g.node(clamp).outputs[0]] if clamp is not None else yp
    out = out.view((geo.n, w_shape[0], geo.ho, geo.wo))
    scale = None
    if mode == "int":
        assert wt.scale is not None
        scale = lw.const(f"{n.inputs[1]}@conv_scale", wt.scale, "fp32")
    bias = None
    if len(n.inputs) > 2 and n.inputs[2]:
        b = np.asarray(lw.g.weights[n.inputs[2]], np.float32).reshape(-1)
        bias = lw.const(f"{n.inputs[2]}@fp32", b, "fp32", source=n.inputs[2])
    if clamp is not None:
        lw.tg.fused_into[clamp] = n.id
    return ConvJob(n, geo, groups, x, xt, sx, wt, out, scale, bias, bounds)


def _activation(lw: Lowering, n: LayerIR, mode: str) -> tuple[Placement, str, float | None] | None:
    """(HBM placement, dtype the TE reads, static scale) of the input. Int8 data behind a
    per-tensor DEQUANTIZE is read as it is (`gemm.prepare_x`, no operation); an fp32
    activation is quantized (int) or cast (fp16) by each tile in TCM right after its load
    (`conv_plan.float_activation`), which saves the int8 / fp16 copy's HBM round trip and
    the phase barrier it needs."""
    x_tid = n.inputs[0]
    if dequantized_int8(lw, x_tid, mode):
        prep = prepare_x(lw, n, x_tid, mode, 8)
        if prep is None or prep.scale is None:
            return None
        return prep.placement, "int8", float(np.asarray(prep.scale).reshape(()))
    return float_activation(lw, x_tid, mode)


def lower_conv(lw: Lowering, n: LayerIR) -> bool:
    """Tile a CONV layer (False: it runs whole, e.g. 3-D, int4 or asymmetric weights)."""
    if not conv_tiled(lw, n):
        return False
    job = _job(lw, n)
    if job is None:
        raise RuntimeError(f"{n.id}: the conv cannot be tiled, yet `conv_tiled` says it can")
    if job.geo.c // job.groups == 1:
        _depthwise(lw, job)
    else:
        _dense(lw, job)
    return True


# ----------------------------------------------------------------------------- epilogue


def _epilogue(lw: Lowering, job: ConvJob, pe: int, acc: Buf, img: int, co0: int, cob: int,
              oh0: int, toh: int) -> None:
    """Scale, bias and clamp the accumulator block in place, then store it."""
    geo, out, nid = job.geo, job.out, job.n.id
    length = toh * geo.wo
    out_q = QBITS_OF[out.dtype]
    if job.integer or job.bias is not None or out.dtype != "fp32":
        reads: list[tuple[str, Buf]] = [("in", acc)]
        fields = {"length": length, "rows": cob, "qbits_activation": 32, "out_qbits": out_q,
                  "in_dtype": "int32" if job.integer else "float32",
                  "scale": job.sx if job.integer else 1.0}
        for role, p in (("row_scale", job.scale), ("row_bias", job.bias)):
            if p is not None:
                b = lw.buf(pe, cob * 4, f"{nid}.{role}")
                lw.dma(False, pe, b, p, co0, 1, cob, cob, nid, role="weight")
                reads.append((role, b))
        # in place: the result overwrites the accumulator it is computed from
        lw.op("VE_DEQUANTIZE_TILE", pe, nid, fields, reads=reads, writes=[("out", acc)],
              frees=[b for _, b in reads[1:]])
    if job.clamp is not None:
        lw.op("VE_CLIP_TILE", pe, nid, clip_fields(job.clamp, cob, length, out_q),
              reads=[("in", acc)], writes=[("out", acc)])
    hw = geo.ho * geo.wo
    lw.dma(True, pe, acc, out, (img * job.cout + co0) * hw + oh0 * geo.wo, cob, length, hw,
           nid, frees=[acc])


def _dense(lw: Lowering, job: ConvJob) -> None:
    """TE_CONV_TILE tiles of a float or QConfig-quantized conv, the epilogue per block."""
    dense_tiles(lw, job, QBITS_OF[job.xt], job.w.bits, ITEMSIZE[job.w.placement.dtype],
                lambda pe, acc, img, co0, cob, oh0, t: _epilogue(lw, job, pe, acc, img, co0,
                                                                 cob, oh0, t))


def _depthwise(lw: Lowering, job: ConvJob) -> None:
    """VE_DWCONV_TILE tiles: (image, channel block, row block)."""
    geo, nid, w = job.geo, job.n.id, job.w
    mult = job.cout // geo.c
    taps = geo.kh * geo.kw
    qa = QBITS_OF[job.xt]
    for img, ci0, cb, oh0, t in dw_units(lw, job.blocking):
        rb = geo.rows_for(oh0, t)
        pe = lw.next_pe()
        bx = load_x(lw, job, pe, img, ci0, cb, rb.first, rb.rows)
        nw = cb * mult * taps
        bw = lw.buf(pe, math.ceil(nw * ITEMSIZE[w.placement.dtype]), f"{nid}.wgt")
        lw.dma(False, pe, bw, w.placement, ci0 * mult * taps, 1, nw, nw, nid,
               role="weight")
        acc = lw.buf(pe, cb * mult * t * geo.wo * 4, f"{nid}.acc")
        fields = {"c": cb, "multiplier": mult, **geo.window_fields(rb),
                  "qbits_activation": qa, "qbits_weight": w.bits, "out_qbits": 32,
                  **float_format(job.xt)}
        lw.op("VE_DWCONV_TILE", pe, nid, fields, reads=[("in", bx), ("wgt", bw)],
              writes=[("out", acc)], frees=[bx, bw])
        _epilogue(lw, job, pe, acc, img, ci0 * mult, cb * mult, oh0, t)
