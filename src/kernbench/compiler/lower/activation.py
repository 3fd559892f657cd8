"""How a TE layer reads its activation: quantized / cast into an HBM scratch once per
(tensor, format), or read as it is (fp32 mode, fp16 already, int8 data behind a
per-tensor DEQUANTIZE); which DEQUANTIZE / QDQ layers need no operation of their own
because their TE consumers read around them (`gemm` tiles the layer itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import BFP_FORMATS, ITEMSIZE, Placement
from kernbench.compiler.lower.context import FLOAT_DTYPES, QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.te_weights import te_weight
from kernbench.compiler.lower.values import PreparedX, QuantStore
from kernbench.compiler.quantize import int8_dequant_source
from kernbench.ir.model import Graph, LayerIR


def te_mode(n: LayerIR) -> str | None:
    """How a TE layer is tiled: "int" (A8 or A4 with W8 / W4; a 4-bit activation is
    quantized into a packed int4 scratch), "int16" (a 16-bit integer
    operand: A16 with W16 / W8 / W4, or A8 with W16; int64 accumulators),
    "fp16", "bf16" (16-bit float operands, fp32 accumulators; a bf16 activation with
    bfp8_b / bfp4_b weights too; an fp16 / bf16 activation with 4-, 8- or 16-bit integer
    weights, stored dequantized to fp32 as the interpreter multiplies them), "fp32" (also with
    block-float or integer weights), "dq" (an 8- or
    16-bit integer activation with fp16 / bf16 weights: the activation quantized and
    dequantized into an fp32 scratch, as the interpreter computes it, times the 16-bit
    float weight); None: the layer runs whole as a layer op (e.g. A4 with W16)."""
    qa, qw = n.qbits_activation, n.qbits_weight
    if qa in (8, 4) and qw in (8, 4, None):
        return "int"
    if qa in (8, 16) and qw in (16, 8, 4) and 16 in (qa, qw):
        return "int16"
    if qa in ("fp16", "bf16") and qw in (qa, None, 4, 8, 16):
        return qa
    if qw in BFP_FORMATS and qa in ("bf16", None):
        return qa or "fp32"  # block-float weights load decoded into bf16
    if qa is None and qw in (None, 4, 8, 16):
        return "fp32"  # integer weights stored dequantized to fp32
    if qa in (8, 16) and qw in ("fp16", "bf16"):
        return "dq"
    return None


def widened_weight_layers(g: Graph) -> list[tuple[str, int]]:
    """(layer name, weight bits) of every GEMM / QKV_PROJ whose integer weights are stored
    dequantized to fp32 (`te_weights._dequantized_weight`: weight-only quantization under float
    activations), in graph order. Their HBM traffic and footprint are those of fp32 weights,
    which a user comparing widths must be told."""
    out: list[tuple[str, int]] = []
    for n in g.nodes:
        if n.op_type not in ("GEMM", "QKV_PROJ") or not isinstance(n.qbits_weight, int):
            continue
        if te_mode(n) not in ("fp16", "bf16", "fp32"):
            continue
        ws = n.inputs[1:2] if n.op_type == "GEMM" else n.inputs[1:4]
        ts = [g.tensors.get(w) for w in ws if w]
        if ts and all(t is not None and t.const and t.quant is None for t in ts):
            out.append((str(n.metadata.get("layer_name") or n.id), int(n.qbits_weight)))
    return out


def widened_weights_note(g: Graph) -> str | None:
    """One stderr line when `widened_weight_layers` finds any (None otherwise): the program
    moves and holds 4 bytes a weight for them, not the QConfig's width."""
    layers = widened_weight_layers(g)
    if not layers:
        return None
    bits = "/".join(map(str, sorted({b for _, b in layers})))
    names = ", ".join(n for n, _ in layers[:3]) + (", …" if len(layers) > 3 else "")
    n = len(layers)
    return (f"weight-only quantization: {n} layer{'s' if n > 1 else ''} store their "
            f"{bits}-bit weights dequantized to fp32 ({names}): their HBM traffic and "
            "footprint are fp32's, not the QConfig width's (docs/quantization.md)")


def dequant_bypassed(lw: Lowering, n: LayerIR) -> bool:
    """A DEQUANTIZE whose every consumer is an integer TE layer reading the int8 source
    directly (see `prepare_x`) needs no operation of its own."""
    if n.op_type != "DEQUANTIZE":
        return False
    g = lw.g
    out = n.outputs[0]
    t = g.tensors[out]
    if out in g.outputs or t.quant is None or not t.consumers:
        return False
    if int8_dequant_source(g, out) is None:
        return False
    return all(g.node(c).op_type in ("GEMM", "QKV_PROJ") and g.node(c).inputs[0] == out
               and te_mode(g.node(c)) == "int" and g.node(c).qbits_activation == 8
               for c in t.consumers)


# ----------------------------------------------------------------------------- activations


@dataclass
class Prepared:
    """The activations TE layers converted themselves, by (tensor, mode, bits): the first
    layer reading one converts it (its tiles make the scratch), the later ones reuse it.
    `prepare_x`'s own memo (`Lowering.local`): no other module reads it."""

    done: dict[tuple[str, str, int], PreparedX | None] = field(default_factory=dict)


def prepare_x(lw: Lowering, n: LayerIR, x_tid: str, mode: str, bits: int) -> PreparedX | None:
    """The activation as the TE reads it: quantized / cast into an HBM scratch, once per
    (tensor, format) however many layers read it."""
    key = (x_tid, mode, bits)
    stored = lw.lowering_plan.quant_stored(x_tid) if mode == "int" else None
    if stored is not None and stored.bits == bits:
        return _stored_by_producer(lw, x_tid, stored)
    done = lw.local(Prepared).done
    if key not in done:
        done[key] = _prepare_x_once(lw, n, x_tid, mode, bits)
    return done[key]


def _stored_by_producer(lw: Lowering, x_tid: str, qs: QuantStore) -> PreparedX:
    """The quantized copy the lowering plan has `x_tid`'s producer store (`xquant`)."""
    alloc = lw.plan.allocations.get(f"{x_tid}@int{qs.bits}")
    if alloc is None:
        raise RuntimeError(f"{x_tid}: the lowering plan has its producer store it "
                           "quantized, yet no tile did")
    return PreparedX(alloc.placement(), qs.scale, qs.zero_point)


def preparable(lw: Lowering, x_tid: str, mode: str, bits: int) -> bool:
    """Does `prepare_x` give activation `x_tid` for `mode` at `bits` (its producer's
    quantized copy, or one it can read or convert)? Allocates and emits nothing (the plan
    pass asks)."""
    stored = lw.lowering_plan.quant_stored(x_tid) if mode == "int" else None
    return stored is not None and stored.bits == bits \
        or preparable_rows(lw, x_tid, mode, bits) is not None


def preparable_rows(lw: Lowering, x_tid: str, mode: str, bits: int) -> int | None:
    """The rows (M) of activation `x_tid` as `prepare_x` prepares it for `mode` at `bits`,
    or None when it cannot; allocates and emits nothing (the plan pass asks)."""
    how = _read_as_is(lw, x_tid, mode, bits)
    if how is None or isinstance(how, PreparedX):
        return None if how is None else int(how.placement.shape[0])
    integer = mode in ("int", "int16", "dq")
    sq = _static_quant(lw, x_tid, bits if mode == "dq" or bits == 4 else None) \
        if integer else None
    if integer and (sq is None or mode == "dq" and sq[1]):
        return None
    xp = lw.placement(_quantize_source(lw, x_tid) if integer else x_tid)
    return int(np.prod(xp.shape[:-1]))


def _read_as_is(lw: Lowering, x_tid: str, mode: str,
                bits: int = 8) -> PreparedX | str | None:
    """A PreparedX when the TE reads the activation's HBM data directly; else the
    converted dtype to make ("int8", "int4" packed, "fp16", "bf16"), or None when it
    cannot be tiled (4 bits: a row of an odd length would not end on a byte)."""
    g = lw.g
    if mode == "int" and bits == 8:
        dq = int8_dequant_source(g, x_tid)
        if dq is not None and g.tensors[x_tid].quant is not None:
            src = lw.placement(dq[0])
            if src.contiguous:  # int8 data already in HBM: the TE reads it directly
                k = src.shape[-1]
                m = int(np.prod(src.shape[:-1]))
                sx = np.asarray(g.weights[dq[1]], np.float32).reshape(())
                return PreparedX(src.view((m, k), dtype="int8"), sx)
    xp = lw.placement(x_tid)
    if not xp.contiguous:
        return None
    k = xp.shape[-1]
    m = int(np.prod(xp.shape[:-1]))
    if mode in ("fp16", "bf16") and xp.dtype == mode:  # already in the format in HBM
        return PreparedX(xp.view((m, k)), None)
    # a float activation of another width (fp16 / bf16 exports) is quantized from its
    # stored width; fp32 mode and the 16-bit float casts read fp32 only
    if xp.dtype != "fp32" and not (mode in ("int", "int16") and xp.dtype in FLOAT_DTYPES):
        return None
    if mode == "fp32":
        return PreparedX(xp.view((m, k)), None)
    if mode == "dq":
        return "fp32"
    if mode == "int16":
        return "int16" if g.tensors[x_tid].quant is not None \
            and g.tensors[x_tid].quant.dtype == "int16" else "int8"
    if mode == "int" and bits == 4:
        return "int4" if k % 2 == 0 else None
    return "int8" if mode == "int" else mode


def _static_quant(lw: Lowering, x_tid: str, bits: int | None = None
                  ) -> tuple[np.ndarray, int] | None:
    """The activation's static per-tensor (scale, zero point of the int8 data), or None;
    with `bits`, None also when it was calibrated at other bits (the interpreter then
    quantizes dynamically).
    A uint8 activation is quantized straight to int8 shifted by -128 (exact:
    clip(q + z, 0, 255) - 128 = clip(q + z - 128, -128, 127)), so its zero point is z - 128."""
    t = lw.g.tensors[x_tid]
    if t.quant is None or t.quant.axis is not None \
            or t.quant.dtype not in ("int8", "uint8", "int16", "int4"):
        return None
    if bits is not None and int(t.quant.dtype.lstrip("uint")) != bits:
        return None
    sx = np.asarray(lw.g.weights[t.quant.scale], np.float32)
    zp = (np.asarray(lw.g.weights[t.quant.zero_point]) if t.quant.zero_point
          else np.zeros((), np.int8))
    if sx.size != 1 or zp.size != 1:
        return None
    z = int(zp.reshape(())) - (128 if t.quant.dtype == "uint8" else 0)
    return sx.reshape(()), z


def qdq_bypassed(lw: Lowering, n: LayerIR) -> bool:
    """A QDQ (fake quantization) whose every consumer is an integer TE layer that
    quantizes its output with the very same parameters needs no operation of its own: the
    TE layers quantize the QDQ's input instead (quantize(dequantize(quantize(x))) =
    quantize(x) exactly)."""
    if n.op_type != "QDQ" or len(n.inputs) < 2:
        return False
    g = lw.g
    out = n.outputs[0]
    t = g.tensors[out]
    if out in g.outputs or t.quant is None or not t.consumers \
            or t.quant.scale != n.inputs[1] or _static_quant(lw, out) is None:
        return False
    if not lw.placement(n.inputs[0]).contiguous or lw.placement(n.inputs[0]).dtype != "fp32":
        return False
    for c in t.consumers:
        cn = g.node(c)
        ws = [cn.inputs[1]] if cn.op_type == "GEMM" else cn.inputs[1:4]
        if cn.op_type not in ("GEMM", "QKV_PROJ") or cn.inputs[0] != out \
                or te_mode(cn) != "int" or cn.qbits_activation != 8 or any(te_weight(lw, cn, w, "int") is None for w in ws):
            return False
    return True


def _quantize_source(lw: Lowering, x_tid: str) -> str:
    """The tensor the activation quantize step reads: a bypassed QDQ's input."""
    p = lw.g.tensors[x_tid].producer
    return lw.g.node(p).inputs[0] if p and qdq_bypassed(lw, lw.g.node(p)) else x_tid


def _prepare_x_once(lw: Lowering, n: LayerIR, x_tid: str, mode: str,
                    bits: int) -> PreparedX | None:
    how = _read_as_is(lw, x_tid, mode, bits)
    if how is None or isinstance(how, PreparedX):
        return how
    integer = mode in ("int", "int16", "dq")
    xp = lw.placement(_quantize_source(lw, x_tid) if integer else x_tid)
    k = xp.shape[-1]
    sx, zx = None, 0
    if integer:
        sq = _static_quant(lw, x_tid, bits if mode == "dq" or bits == 4 else None)
        if sq is None or mode == "dq" and sq[1]:
            return None  # "dq" dequantizes a symmetric activation (the VE's scale only)
        sx, zx = sq
    out_dt = how
    out = _scratch(lw, x_tid, out_dt, xp)
    for r0, r, pe in lw.spans_on_pes(conversion_spans(lw, out, integer)):
        bi = lw.buf(pe, r * k * ITEMSIZE[xp.dtype], f"{n.id}.x32")
        bo = lw.buf(pe, r * k * ITEMSIZE[out_dt], f"{n.id}.xq")
        lw.dma(False, pe, bi, xp, r0 * k, 1, r * k, r * k, n.id)
        ve = lw.engines.ve(pe)
        if mode == "dq":
            bq = lw.buf(pe, r * k * bits / 8, f"{n.id}.xq")
            lw.op("VE_QUANTIZE_TILE", pe, n.id,
                  {"length": k, "rows": r, "qbits_activation": 32, "out_qbits": bits,
                   "scale": float(sx), "zero_point": 0, **ve},
                  reads=[("in", bi)], writes=[("out", bq)], frees=[bi])
            lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
                  {"length": k, "rows": r, "qbits_activation": bits, "out_qbits": 32,
                   "scale": float(sx), "in_dtype": f"int{bits}", **ve},
                  reads=[("in", bq)], writes=[("out", bo)], frees=[bq])
        elif integer:
            lw.op("VE_QUANTIZE_TILE", pe, n.id,
                  {"length": k, "rows": r, "qbits_activation": QBITS_OF[xp.dtype],
                   "out_qbits": bits, "scale": float(sx), "zero_point": zx, **ve,
                   **float_format(xp.dtype)},
                  reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        else:
            lw.op("VE_COPY_TILE", pe, n.id, {"length": k, "rows": r,
                                             "qbits_activation": 32, "out_qbits": 16, **ve,
                                             **float_format(out_dt)},
                  reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, out, r0 * k, 1, r * k, r * k, n.id, frees=[bo])
    lw.phase()
    return PreparedX(out, None) if mode == "dq" else PreparedX(out, sx, zx)


def conversion_spans(lw: Lowering, p: Placement,
                     integer: bool) -> list[tuple[int, int, int | None]]:
    """The row blocks (`Lowering.row_spans`) an activation is converted in, cut over
    placement `p` of its (M, K) scratch: one per PE, or per vector engine of every PE
    when the work pays for it. `prepare_x` cuts them and the plan pass counts them."""
    m, k = int(p.shape[0]), int(p.shape[-1])
    split = lw.engines.ve_blocks(m, k, lw.n_pes, "quantize" if integer else "copy")
    return lw.row_spans(p, m, k, lw.bank // (k * 4), split)


class PreparedForm(NamedTuple):
    """What `prepare_x` makes of an activation, told without making it: the dtype and
    rows the TE reads (dtype None: it cannot prepare it), the row blocks of its
    conversion (none when it is read as it is or stored by its producer), and whether
    `prepare_x` remembers it (`Prepared`: only the first layer asking converts)."""

    dtype: str | None
    rows: int
    spans: list[tuple[int, int, int | None]]
    memo: bool


def prepared_form(lw: Lowering, x_tid: str, mode: str, bits: int) -> PreparedForm:
    """`PreparedForm` of activation `x_tid` for `mode` at `bits`, as `prepare_x` would
    prepare it; allocates and emits nothing (the plan pass asks). The conversion's blocks
    are cut over the source placement: the scratch is spread like it, so on one cube (all
    the plan pass counts blocks for) they are the scratch's."""
    stored = lw.lowering_plan.quant_stored(x_tid) if mode == "int" else None
    if stored is not None and stored.bits == bits:
        return PreparedForm(f"int{bits}", int(np.prod(lw.placement(x_tid).shape[:-1])), [],
                            False)
    how = _read_as_is(lw, x_tid, mode, bits)
    if how is None or isinstance(how, PreparedX):
        return PreparedForm(None, 0, [], True) if how is None else \
            PreparedForm(how.placement.dtype, int(how.placement.shape[0]), [], True)
    integer = mode in ("int", "int16", "dq")
    if integer:
        sq = _static_quant(lw, x_tid, bits if mode == "dq" or bits == 4 else None)
        if sq is None or mode == "dq" and sq[1]:
            return PreparedForm(None, 0, [], True)
    xp = lw.placement(_quantize_source(lw, x_tid) if integer else x_tid)
    m = int(np.prod(xp.shape[:-1]))
    return PreparedForm(how, m, conversion_spans(lw, xp.view((m, xp.shape[-1])), integer),
                        True)


def _scratch(lw: Lowering, x_tid: str, dtype: str, xp: Placement) -> Placement:
    """The HBM scratch a converted activation is stored in (spread like its source)."""
    k = xp.shape[-1]
    m = int(np.prod(xp.shape[:-1]))
    return lw.plan.allocate(f"{x_tid}@{dtype}", (m, k), dtype, "scratch", source=x_tid,
                            spread=bool(xp.parts)).placement()


def quant_params(lw: Lowering, x_tid: str, bits: int = 8) -> tuple[np.ndarray, int] | None:
    """(scale, zero point) when an integer TE layer would quantize `x_tid` at `bits` into
    a scratch with VE_QUANTIZE (float, contiguous, a static per-tensor scale, no bypassed
    QDQ in front); None otherwise. Allocates nothing (the plan pass asks: `xquant`)."""
    if _read_as_is(lw, x_tid, "int", bits) != f"int{bits}" \
            or _quantize_source(lw, x_tid) != x_tid:
        return None
    return _static_quant(lw, x_tid, 4 if bits == 4 else None)


def quant_scratch(lw: Lowering, x_tid: str, bits: int) -> Placement:
    """Allocate the scratch a producer stores `x_tid` quantized into: the one the GEMM's
    own quantized copy would be (`prepare_x` finds it there)."""
    return _scratch(lw, x_tid, f"int{bits}", lw.placement(x_tid))


def te_ready(lw: Lowering, n: LayerIR, mode: str) -> bool:
    """Can TE layer `n` be tiled in `mode` (constant weights the tiles can store)?"""
    weights = [n.inputs[1]] if n.op_type == "GEMM" else n.inputs[1:4]
    return te_mode(n) == mode and all(lw.g.tensors[w].const for w in weights) \
        and all(te_weight(lw, n, w, mode) is not None for w in weights)
