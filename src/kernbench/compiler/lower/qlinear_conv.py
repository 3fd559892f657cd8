"""QLINEAR_CONV (ONNX QLinearConv) as TE_CONV_TILE / VE_DWCONV_TILE tiles.

The tiles, blocks and DMAs are the conv lowering's (`conv`); what differs:
- the activation is the int8 / uint8 tensor in HBM, read as it is (uint8 unsigned:
  ``ifm_signed`` / ``in_signed`` false), so no quantize step in the tile;
- the padding is the activation's zero point (``pad_value``): ONNX pads the real 0, which
  is z_x in x's integers, so with x padded by z_x
  Σ (x − z_x)(w − z_w) = conv(x, w_c) − z_x·Σ_{c,kh,kw} w_c[o] at every output pixel,
  border ones included — a per-channel constant;
- the weight's zero point is removed offline (w_c = w − z_w[o], int8 when it fits);
- that constant and the layer's int32 bias B are one int32 [C_out] vector, the first K
  step's bias (TE) or the depthwise tile's bias (VE), so the accumulator is the exact
  int32 the interpreter computes;
- the epilogue is VE_REQUANTIZE_TILE in place with one multiplier per row (a tile's rows
  are output channels: m[o] = s_x·s_w[o] / s_y), straight to the output's int8 / uint8.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.conv_tiles import ConvJob, dense_tiles, dw_units, load_x
from kernbench.compiler.lower.qlinear import Requant, requant
from kernbench.compiler.lower.qlinear_tiling import qconv_tiling
from kernbench.compiler.lower.values import TeWeight
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR


def _job(lw: Lowering, n: LayerIR) -> tuple[ConvJob, Requant, int, Placement | None] | None:
    """(the conv job, the requantize epilogue, z_x, the int32 bias vector) or None."""
    t = qconv_tiling(lw, n)
    if t is None:
        return None
    wc, term, geo, groups, xp, yp, sx, zx, sw, sy, zy = t
    w, zw_t = n.inputs[3], n.inputs[5]
    cout, cin_g = wc.shape[0], wc.shape[1]
    wp = lw.const(f"{w}-{zw_t}@qconv_int8", wc.reshape((cout, cin_g, geo.kh, geo.kw)), "int8",
                  source=w)
    corr = lw.const(f"{n.id}:{n.outputs[0]}@qconv_bias", term.astype(np.int32), "int32") \
        if np.any(term) else None
    rq = requant(lw, n, sx, sw, sy, zy, cout)
    out = yp.view((geo.n, cout, geo.ho, geo.wo))
    job = ConvJob(n, geo, groups, xp.view((geo.n, geo.c, geo.h, geo.w)), xp.dtype, None,
                  TeWeight(wp, None, 8), out, None, None, None)
    return job, rq, zx, corr


def lower_qlinear_conv(lw: Lowering, n: LayerIR) -> bool:
    """Tile a QLINEAR_CONV (False: it runs whole, e.g. 3-D, a per-row activation scale or
    a weight zero point that does not re-center into int8)."""
    found = _job(lw, n)
    if found is None:
        return False
    job, rq, zx, corr = found
    if job.geo.c // job.groups == 1:
        _depthwise(lw, job, rq, zx, corr)
    else:
        _dense(lw, job, rq, zx, corr)
    return True


def _x_fields(job: ConvJob, zx: int, signed_key: str) -> dict:
    """The activation's signedness and the zero-point padding, when they differ from the
    defaults (signed, zero)."""
    out: dict = {}
    if job.x.dtype == "uint8":
        out[signed_key] = False
    if zx:
        out["pad_value"] = zx
    return out


def _bias(lw: Lowering, pe: int, nid: str, corr: Placement | None, co0: int,
          cob: int) -> list[tuple[str, Buf]]:
    """The int32 bias block of output channels [co0, co0 + cob), loaded, as a read."""
    if corr is None:
        return []
    bb = lw.buf(pe, cob * 4, f"{nid}.qbias")
    lw.dma(False, pe, bb, corr, co0, 1, cob, cob, nid, role="weight")
    return [("bias", bb)]


def _epilogue(lw: Lowering, job: ConvJob, rq: Requant, pe: int, acc: Buf, img: int,
              co0: int, cob: int, oh0: int, toh: int) -> None:
    """Requantize the accumulator block in place (one multiplier per channel) and store
    it."""
    geo, nid = job.geo, job.n.id
    length = toh * geo.wo
    bm = lw.buf(pe, cob * 4, f"{nid}.qmult")
    lw.dma(False, pe, bm, rq.mult, co0, 1, cob, cob, nid, role="weight")
    lw.op("VE_REQUANTIZE_TILE", pe, nid,
          {"length": length, "rows": cob, **rq.fields(), **lw.engines.ve(pe)},
          reads=[("in", acc), ("row_multiplier", bm)], writes=[("out", acc)], frees=[bm])
    hw = geo.ho * geo.wo
    lw.dma(True, pe, acc, job.out, (img * job.cout + co0) * hw + oh0 * geo.wo, cob, length,
           hw, nid, frees=[acc])


def _dense(lw: Lowering, job: ConvJob, rq: Requant, zx: int, corr: Placement | None) -> None:
    """TE_CONV_TILE tiles (`conv_tiles.dense_tiles`) of int8 data; the first K step adds the
    int32 bias, the epilogue requantizes."""
    nid = job.n.id
    dense_tiles(lw, job, 8, 8, ITEMSIZE["int8"],
                lambda pe, acc, img, co0, cob, oh0, t: _epilogue(lw, job, rq, pe, acc, img,
                                                                 co0, cob, oh0, t),
                x_fields=_x_fields(job, zx, "ifm_signed"),
                bias=lambda pe, co0, cob: _bias(lw, pe, nid, corr, co0, cob))


def _depthwise(lw: Lowering, job: ConvJob, rq: Requant, zx: int,
               corr: Placement | None) -> None:
    """VE_DWCONV_TILE tiles: (image, channel block, row block), with the int32 bias."""
    geo, nid, w = job.geo, job.n.id, job.w
    mult = job.cout // geo.c
    taps = geo.kh * geo.kw
    xf = _x_fields(job, zx, "in_signed")
    for img, ci0, cb, oh0, t in dw_units(lw, job.blocking):
        rb = geo.rows_for(oh0, t)
        pe = lw.next_pe()
        bx = load_x(lw, job, pe, img, ci0, cb, rb.first, rb.rows)
        nw = cb * mult * taps
        bw = lw.buf(pe, nw, f"{nid}.wgt")
        lw.dma(False, pe, bw, w.placement, ci0 * mult * taps, 1, nw, nw, nid,
               role="weight")
        extra = _bias(lw, pe, nid, corr, ci0 * mult, cb * mult)
        acc = lw.buf(pe, cb * mult * t * geo.wo * 4, f"{nid}.acc")
        fields = {"c": cb, "multiplier": mult, **geo.window_fields(rb),
                  "qbits_activation": QBITS_OF[job.x.dtype], "qbits_weight": 8,
                  "out_qbits": 32, **xf}
        lw.op("VE_DWCONV_TILE", pe, nid, fields,
              reads=[("in", bx), ("wgt", bw)] + extra, writes=[("out", acc)],
              frees=[bx, bw] + [b for _, b in extra])
        _epilogue(lw, job, rq, pe, acc, img, ci0 * mult, cb * mult, oh0, t)
