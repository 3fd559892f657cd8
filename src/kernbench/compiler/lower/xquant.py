"""A GEMM's activation quantized by the layer that produces it.

An integer GEMM reads its activation as int8 from an HBM scratch (`activation.prepare_x`):
normally its own first phase loads the fp32 rows, quantizes them (VE_QUANTIZE, the
calibrated static scale) and stores them there, after the producer has stored them. When
the producer is a row-wise layer (LayerNorm, ...), a GEMM epilogue whose fused consumer
(GELU, ...) writes the activation, or an attention whose heads the GEMM reads as one row
(the output projection), the producer's tile is still in TCM: it is quantized
there and stored into the scratch beside the fp32 store, and the GEMM finds the scratch
ready. The plan pass decides which activations (`planned_quant_stores`: the lowering
plan's `quant_stores`); the producer's tiles allocate the scratch (`quant_out`) and the
GEMM finds it by key (`activation.prepare_x`). That removes a load, a store and a
command round trip per block from the chain between two layers. Likewise a QKV projection whose K or V only a
tiled integer attention reads (a prefill) stores them at 8 KV bits too (`kv_quant_out`):
every query chunk of the attention then loads int8 K / V instead of loading and
quantizing the float ones itself. The values are the same ones: VE_QUANTIZE with
the same scale and zero point on the same fp32 values (the data pass stays exact).

When nothing else reads the float tensor (every consumer is one of those integer layers,
it is no graph output), the float store is dead: the producer stores the quantized tile
only (`store_tile`), and the float tensor and the views on the way get no storage and no
view in memory.json (`drop_unwritten`; `--dump-intermediates` does not compare them), as
a fused GEMM's own output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.layout import float_formats, tiled_attention
from kernbench.compiler.lower.activation import quant_params, quant_scratch, te_ready
from kernbench.compiler.lower.context import QBITS_OF, Lowering, float_format
from kernbench.compiler.lower.placement import is_view, sole_consumer
from kernbench.compiler.lower.row_spec import ROW_OPS, row_spec
from kernbench.compiler.lower.values import FusedStep, KvRows, KvStore, QuantStore
from kernbench.compiler.tilegraph import Buf, TileOp
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


@dataclass(frozen=True)
class QuantOut:
    """Where the producer stores its tiles quantized: the int8 scratch the consuming
    GEMMs read, its scale and zero point, and the bits."""

    scratch: Placement
    scale: float
    zero_point: int
    bits: int
    #: the float tensor and the views of it on the way to its readers, when only the
    #: quantized store is read (no float store then, `store_tile`); empty otherwise
    unread: tuple[str, ...] = ()


def quant_out(lw: Lowering, tid: str) -> QuantOut | None:
    """The quantized store the lowering plan gives the producer of `tid`
    (`planned_quant_store`), its scratch allocated now (the GEMMs find it by key:
    `activation.prepare_x`), or None."""
    qs = lw.lowering_plan.quant_stores.get(tid)
    if qs is None:
        return None
    return QuantOut(quant_scratch(lw, qs.read_as, qs.bits), float(qs.scale), qs.zero_point,
                    qs.bits, qs.unread)


def planned_quant_store(lw: Lowering, tid: str, same_cols: bool = True) -> QuantStore | None:
    """The quantized store a producer of `tid` can add, or None. Only when `tid` (or the
    reshape that aliases it, same rows) is read as the activation of integer GEMM /
    QKV_PROJ layers (at one bitwidth) that would quantize it into a scratch (no bypassed
    QDQ on the way) and is contiguous float (fp32, or the 16-bit float of an fp16 / bf16
    export, quantized from its stored width as the GEMM would); other consumers read the
    float store as before. `same_cols` False: the producer's tiles land in the scratch at
    their own element offsets (an attention's head blocks of a (B, S, H, D) output the
    GEMM reads as (B·S, H·D)). The plan pass asks; nothing is allocated here."""
    g = lw.g
    shape = lw.placement(tid).shape
    if len(shape) < 2:
        return None  # a scalar or a vector: no rows to quantize for a GEMM
    cols = shape[-1]
    chain = [tid]
    while True:  # through reshapes that alias it, to the tensor the GEMMs read
        t = g.tensors[tid]
        if not t.consumers or tid in g.outputs:
            return None
        c = g.node(t.consumers[0])
        if len(t.consumers) > 1 or not is_view(lw.plan, c) or c.inputs[0] != tid:
            break
        tid = c.outputs[0]
        chain.append(tid)
    if not lw.placement(tid).shape or same_cols and lw.placement(tid).shape[-1] != cols:
        return None  # the scratch's rows must be the producer's rows
    # the integer TE layers that would quantize it; other consumers read the fp32 store
    te = [g.node(c) for c in t.consumers
          if g.node(c).op_type in ("GEMM", "QKV_PROJ") and g.node(c).inputs[0] == tid]
    if not te or not all(te_ready(lw, cn, "int") for cn in te) \
            or len({cn.qbits_activation for cn in te}) != 1:
        return None
    bits = int(te[0].qbits_activation)
    params = quant_params(lw, tid, bits)
    if params is None:
        return None
    # the GEMMs read the scratch (`prepare_x` finds it); nobody else reads the float
    only_te = set(t.consumers) == {cn.id for cn in te} \
        and all(cn.inputs[1:].count(tid) == 0 for cn in te)
    return QuantStore(tid, bits, params[0], params[1], tuple(chain) if only_te else ())


def heads_as_rows(out: Placement) -> bool:
    """Does an attention output (B, S, H, D) lie so that a head block's element offsets
    are its offsets in the (B·S, H·D) matrix a GEMM reads (an axis of one element has
    any stride)?"""
    bsz, hq, s_len, d = out.shape
    want = (s_len * hq * d, d, hq * d, 1)
    return all(n == 1 or got == w for n, got, w in zip(out.shape, out.strides, want,
                                                      strict=True))


def planned_quant_stores(lw: Lowering,
                         epilogue: Mapping[str, FusedStep]) -> dict[str, QuantStore]:
    """Every activation its producer's tiles also store quantized (`planned_quant_store`),
    by tensor: the output of a row-wise layer the row tiles compute (`row_spec`: the
    row-wise lowering, or the GEMM that row-reduces it), of the consumer a GEMM's
    epilogue applies (`epilogue`, the plan's), and of an integer attention whose output
    lies as rows of heads (`heads_as_rows`). The plan pass asks."""
    g = lw.g
    found: dict[str, QuantStore] = {}
    for n in g.nodes:
        wanted: list[tuple[str, bool]] = []
        if n.id in epilogue:
            wanted.append((epilogue[n.id].layer.outputs[0], True))
        if n.op_type in ROW_OPS and row_spec(lw, n) is not None:
            wanted.append((n.outputs[0], True))
        if n.op_type == "ATTENTION" and float_formats(n) is None and tiled_attention(g, n) \
                and heads_as_rows(lw.plan.placements[n.outputs[0]]):
            wanted.append((n.outputs[0], False))
        for tid, same_cols in wanted:
            qs = None if tid in found else planned_quant_store(lw, tid, same_cols)
            if qs is not None:
                found[tid] = qs
    return found


def planned_kv_store(lw: Lowering, tid: str) -> KvStore | None:
    """The int8 Q, K or V a GEMM producing `tid` can store for the attention that reads
    it, or None: when `tid` (float, contiguous), through views, is read by one tiled
    integer ATTENTION only, as its Q at 8 activation bits or its K or V at 8 KV bits,
    with a static scale and no zero point, and the view starts where `tid` does. The
    attention reads the scratch (same rows and columns as `tid`) through the same view.
    (Q: only for an attention split along its keys, whose ranges' PEs would each quantize
    it.) The plan pass asks; nothing is allocated here."""
    g = lw.g
    src = lw.placement(tid)
    if src.dtype not in ("fp32", "fp16", "bf16") or not src.contiguous or len(src.shape) < 2:
        return None
    found = sole_consumer(g, lw.plan, tid)
    if found is None:
        return None
    c, chain = found
    vid = chain[-1]
    t = g.tensors[vid]
    if c.op_type != "ATTENTION" or vid not in c.inputs[:3] or c.inputs[:3].count(vid) != 1 \
            or (vid != c.inputs[0] and c.qbits_kv != 8) or c.qbits_activation != 8 \
            or node_attrs(c).softcap:
        return None
    # Q only when the attention splits its keys over PEs (`kv_parts`): each range's PE
    # would quantize the same query rows again. Unsplit, a query chunk quantizes its rows
    # once anyway, and moving that into the projection is no faster there
    if vid == c.inputs[0] and int(node_attrs(c).kv_parts or 1) < 2:
        return None
    quant = t.quant
    view = lw.placement(vid)
    if not tiled_attention(g, c) or quant is None or quant.zero_point or quant.axis is not None \
            or view.addr != src.addr or view.parts != src.parts:
        return None
    scale = float(np.asarray(g.weights[quant.scale], np.float32).reshape(()))
    m = int(np.prod(src.shape[:-1]))
    cuts = _query_cuts(lw, c, view) if vid == c.inputs[0] and m == 1 else []
    # the attention reads Q / K / V from the scratch only (`attention.plan_attention`),
    # and an attention `tiled_attention` accepts is tiled or refused, never run whole
    only_kv = c.inputs.count(vid) == 1
    return KvStore(vid, view.shape, view.strides, scale, tuple(cuts),
                   tuple(chain) if only_kv else ())


def kv_quant_out(lw: Lowering, tid: str) -> QuantOut | None:
    """The int8 store the lowering plan gives the GEMM producing `tid`
    (`planned_kv_store`), its scratch allocated now, or None."""
    ks = lw.lowering_plan.kv_stores.get(tid)
    if ks is None:
        return None
    src = lw.placement(tid)
    m = int(np.prod(src.shape[:-1]))
    scratch = lw.plan.allocate(f"{tid}@kv8", (m, src.shape[-1]), "int8", "scratch",
                               source=tid, spread=bool(src.parts), cuts=ks.cuts).placement()
    return QuantOut(scratch, ks.scale, 0, 8, ks.unread)


def kv_scratch(lw: Lowering, vid: str) -> Placement | None:
    """Where an attention reads its input `vid` when its projection stored it at 8 bits
    (`kv_quant_out`, found in the memory plan by key), else None."""
    for tid, ks in lw.lowering_plan.kv_stores.items():
        if ks.view == vid:
            return lw.plan.allocations[f"{tid}@kv8"].placement().view(ks.view_shape,
                                                                      ks.view_strides)
    return None


def _query_cuts(lw: Lowering, c: LayerIR, view: Placement) -> list[tuple[int, int]]:
    """(end byte, cube) of each run of heads of a one-row query whose keys live in one
    cube: its int8 copy is cut there, so that every key range's PE loads its
    head's query in its own cube. [] when the keys are not spread over the cubes, or the
    heads are not blocks of D bytes in order."""
    kp = lw.placement(c.inputs[1])
    bsz, hq, s_len, d = view.shape
    hkv = kp.shape[1]
    if not kp.parts or bsz != 1 or s_len != 1 or view.strides[1] != d or view.strides[3] != 1:
        return []
    cuts: list[tuple[int, int]] = []
    for h in range(hq):
        cube = lw.cube_near(kp, (h // (hq // hkv)) * kp.strides[1])
        if cube is None:
            return []
        if cuts and cuts[-1][1] == cube:
            cuts[-1] = ((h + 1) * d, cube)
        else:
            cuts.append(((h + 1) * d, cube))
    return cuts if len(cuts) > 1 else []


def store_quantized(lw: Lowering, q: QuantOut, pe: int, src: Buf, layer: str,
                    elem_off: int, rows: int, row_elems: int, row_stride: int,
                    engine: dict[str, Any], dtype: str = "fp32",
                    frees: Sequence[Buf] = ()) -> list[TileOp]:
    """Quantize the float tile `src` (rows × row_elems of `dtype`) in TCM on the same vector engine
    and store it into its rows of the scratch; returns the two ops (a fused epilogue
    marks them as part of its GEMM). `frees`: buffers released once quantized."""
    bq = lw.buf(pe, rows * row_elems * q.bits / 8, f"{layer}.xq")
    qop = lw.op("VE_QUANTIZE_TILE", pe, layer,
                {"length": row_elems, "rows": rows, "qbits_activation": QBITS_OF[dtype],
                 "out_qbits": q.bits, "scale": q.scale, "zero_point": q.zero_point, **engine,
                 **float_format(dtype)},
                reads=[("in", src)], writes=[("out", bq)], frees=frees)
    st = lw.dma(True, pe, bq, q.scratch, elem_off, rows, row_elems, row_stride, layer,
                frees=[bq])
    return [qop, st]


def store_tile(lw: Lowering, q: QuantOut | None, pe: int, src: Buf, dst: Placement,
               layer: str, elem_off: int, rows: int, row_elems: int, row_stride: int,
               engine: dict[str, Any], frees: Sequence[Buf]) -> list[TileOp]:
    """Store the float tile `src` at its rows of `dst` (`frees` released after): with `q`,
    its quantized copy first (the consuming GEMMs' chain), and the float store only when
    something reads it (`QuantOut.unread`). Returns the ops."""
    if q is None:
        return [lw.dma(True, pe, src, dst, elem_off, rows, row_elems, row_stride, layer,
                       frees=frees)]
    ops = store_quantized(lw, q, pe, src, layer, elem_off, rows, row_elems, row_stride,
                          engine, dst.dtype, frees=frees if q.unread else ())
    if q.unread:
        return ops
    return ops + [lw.dma(True, pe, src, dst, elem_off, rows, row_elems, row_stride, layer,
                         frees=frees)]


def drop_unwritten(lw: Lowering, q: QuantOut | KvRows | None) -> None:
    """After the producer's tiles: the float tensor no tile wrote (`unread` of a
    `QuantOut` or of a `kv_rows.KvRows`) and the views of it lose their storage and view
    in memory.json (`Lowering.forget`, as a fused epilogue's; the plan gives the views no
    lowering)."""
    if q is not None and q.unread:
        lw.forget(q.unread)
