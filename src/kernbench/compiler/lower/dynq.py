"""Dynamic quantization (onnxruntime's quantize_dynamic) tiled: DYNAMIC_QUANTIZE and
MATMUL_INTEGER → Cast → Mul.

DYNAMIC_QUANTIZE's scale and zero point depend on the whole tensor's minimum and
maximum, so it runs in three phases:
1. row blocks spread over PEs: VE_REDUCE_TILE min and max of each block (partials to an
   HBM scratch);
2. one PE: VE_QPARAMS_TILE combines the partials into (scale, zero point), stored as a
   pair for the next phase and the scale into the layer's scale output; with the pair
   still in TCM, VE_ZPCORR_TILE computes each reading MATMUL_INTEGER's zero-point column
   term −(z − 128)·colsum(W) (int32, to a scratch);
3. row blocks: VE_QUANTIZE_TILE with the run-time pair writes the uint8 values shifted
   to int8 (q − 128, zero point z − 128: exact) into a scratch the TE reads.
A tensor that fits one TCM bank runs all three on one PE from one load (no HBM round
trips between them: the chain of a small layer is latency, not bandwidth).
Only the extremes enter the parameters, so the result is bit-identical to the whole
tensor's DynamicQuantizeLinear.

MATMUL_INTEGER whose output is only cast to fp32 and multiplied by one scalar (the
a_scale·w_scale product onnxruntime writes) becomes the tiled integer GEMM: the weight
re-centered by its zero point offline, the column term of phase 2 added by the first K
step as the TE's bias, and the Cast and the Mul as the epilogue (VE_DEQUANTIZE_TILE with
the run-time scale). A following bias ADD or activation fuses as for any GEMM. The
uint8 tensor, the zero point, the int32 product and the cast are never stored.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.dynq_plan import minmax_spans, one_block, quantize_spans
from kernbench.compiler.lower.gemm import DynamicGemm, gemm
from kernbench.compiler.lower.te_weights import values
from kernbench.compiler.lower.values import (
    DynamicActivation,
    PreparedX,
    TeWeight,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR

#: a uint8 value q is read by the TE as the int8 q - 128
SHIFT = -128


def _drop(lw: Lowering, tid: str) -> None:
    """A tensor the tiles never store: no storage, no view in memory.json."""
    p = lw.plan.placements.pop(tid, None)
    if p is not None and not any(q.key == p.key for q in lw.plan.placements.values()):
        lw.plan.allocations.pop(p.key, None)


def _partials(lw: Lowering, n: LayerIR, x: Placement, rows: int,
              cols: int) -> tuple[Placement, Placement, int]:
    """Phase 1: min and max of each row block into two scratch vectors; their length."""
    blocks = lw.spans_on_pes(minmax_spans(lw, x))
    nb = len(blocks)
    mins = lw.plan.allocate(f"{n.id}@min", (nb,), "fp32", "scratch").placement()
    maxs = lw.plan.allocate(f"{n.id}@max", (nb,), "fp32", "scratch").placement()
    for i, (r0, r, pe) in enumerate(blocks):
        bi = lw.buf(pe, r * cols * 4, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        bmin, bmax = _extremes(lw, n, pe, bi, r * cols, free_in=True)
        lw.dma(True, pe, bmin, mins, i, 1, 1, 1, n.id, frees=[bmin])
        lw.dma(True, pe, bmax, maxs, i, 1, 1, 1, n.id, frees=[bmax])
    return mins, maxs, nb


def _extremes(lw: Lowering, n: LayerIR, pe: int, bi: Buf, count: int,
              free_in: bool) -> tuple[Buf, Buf]:
    """VE_REDUCE_TILE min and max of `count` fp32 values in `bi`: two 1-value buffers."""
    out = []
    for op in ("min", "max"):
        bo = lw.buf(pe, 4, f"{n.id}.{op}")
        lw.op("VE_REDUCE_TILE", pe, n.id,
              {"length": count, "rows": 1, "qbits_activation": 32, "out_qbits": 32,
               "op": op, **lw.engines.ve(pe)},
              reads=[("in", bi)], writes=[("out", bo)],
              frees=[bi] if free_in and op == "max" else [])
        out.append(bo)
    return out[0], out[1]


def _qparams(lw: Lowering, n: LayerIR, pe: int, bmin: Buf, bmax: Buf, nb: int,
             s_out: Placement, consumers: list[LayerIR]) -> DynamicActivation:
    """VE_QPARAMS_TILE on `pe`; the pair and the scale stored; each consumer's zero-point
    column term computed right there (VE_ZPCORR_TILE). Returns the scratches (data not
    yet written)."""
    rows, cols = rows_cols(lw.placement(n.inputs[0]))
    bqp = lw.buf(pe, 8, f"{n.id}.qparams")
    lw.op("VE_QPARAMS_TILE", pe, n.id, {"length": nb, "rows": 1, "qbits_activation": 32,
                                         **lw.engines.ve(pe)},
          reads=[("in", bmin), ("in2", bmax)], writes=[("out", bqp)], frees=[bmin, bmax])
    lw.dma(True, pe, bqp, s_out, 0, 1, 1, 1, n.id)  # the scale is the pair's first value
    qp = lw.plan.allocate(f"{n.id}@qparams", (2,), "fp32", "scratch").placement()
    corr = {}
    for mi in consumers:
        colsum = lw.lowering_plan.integer_matmuls[mi.id].weight.astype(np.int64).sum(axis=0)
        corr[mi.id] = _correction(lw, mi, n.id, pe, colsum, bqp)
    lw.dma(True, pe, bqp, qp, 0, 1, 2, 2, n.id, frees=[bqp])
    data = lw.plan.allocate(f"{n.outputs[0]}@int8", (rows, cols), "int8", "scratch",
                            source=n.outputs[0]).placement()
    return DynamicActivation(data, qp, corr)


def _correction(lw: Lowering, mi: LayerIR, layer: str, pe: int, colsum: np.ndarray,
                bqp: Buf) -> Placement:
    """−(z − 128)·colsum(W) of one MATMUL_INTEGER as int32 [N] in a scratch (chunks that
    fit a bank), from the pair already in TCM; the GEMM tiles load it as their bias."""
    nn = colsum.size
    cs = lw.const(f"{mi.id}@colsum", colsum.astype(np.int32), "int32")
    out = lw.plan.allocate(f"{mi.id}@zpcorr", (nn,), "int32", "scratch").placement()
    per = max(1, lw.bank // 8)
    for c0 in range(0, nn, per):
        c = min(per, nn - c0)
        bc = lw.buf(pe, c * 4, f"{mi.id}.colsum")
        lw.dma(False, pe, bc, cs, c0, 1, c, c, layer, role="weight")
        lw.op("VE_ZPCORR_TILE", pe, layer,
              {"length": c, "rows": 1, "zero_point": SHIFT, **lw.engines.ve(pe)},
              reads=[("in", bc), ("qparams", bqp)], writes=[("out", bc)])
        lw.dma(True, pe, bc, out, c0, 1, c, c, layer, frees=[bc])
    return out


def _quantize_block(lw: Lowering, n: LayerIR, pe: int, bi: Buf, bq: Buf, r: int, cols: int,
                    data: Placement, r0: int) -> None:
    """VE_QUANTIZE_TILE of an r × cols block with the run-time pair, stored as int8."""
    bo = lw.buf(pe, r * cols, f"{n.id}.xq")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": cols, "rows": r, "qbits_activation": 32, "out_qbits": 8,
           "scale": 1.0, "zero_point": SHIFT, **lw.engines.ve(pe)},
          reads=[("in", bi), ("qparams", bq)], writes=[("out", bo)], frees=[bi, bq])
    lw.dma(True, pe, bo, data, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])


def _one_block(lw: Lowering, n: LayerIR, x: Placement, s_out: Placement,
               consumers: list[LayerIR]) -> DynamicActivation:
    """A tensor that fits one TCM bank: every phase on one PE, x loaded once (no HBM round
    trip of the partials or the pair)."""
    rows, cols = rows_cols(x)
    pe = lw.pe_near(x, 0)
    bi = lw.buf(pe, rows * cols * 4, f"{n.id}.in")
    lw.dma(False, pe, bi, x, 0, 1, rows * cols, rows * cols, n.id)
    bmin, bmax = _extremes(lw, n, pe, bi, rows * cols, free_in=False)
    act = _qparams(lw, n, pe, bmin, bmax, 1, s_out, consumers)
    bq = lw.buf(pe, 8, f"{n.id}.qparams")
    lw.dma(False, pe, bq, act.qparams, 0, 1, 2, 2, n.id)
    _quantize_block(lw, n, pe, bi, bq, rows, cols, act.data, 0)
    return act


def lower_dynamic_quantize(lw: Lowering, n: LayerIR) -> bool:
    """Tile a DYNAMIC_QUANTIZE the lowering plan says the tiles compute (module doc)."""
    if n.id not in lw.lowering_plan.dynamic_quantize:
        return False
    x = lw.placement(n.inputs[0])
    s_out = lw.plan.placements[n.outputs[1]]
    rows, cols = rows_cols(x)
    consumers = [lw.g.node(c) for c in lw.g.tensors[n.outputs[0]].consumers]
    if one_block(lw, x):
        _one_block(lw, n, x, s_out, consumers)
    else:
        mins, maxs, nb = _partials(lw, n, x, rows, cols)
        lw.phase()
        # phase 2: one PE combines the partials
        pe = lw.next_pe()
        bmin, bmax = lw.buf(pe, nb * 4, f"{n.id}.mins"), lw.buf(pe, nb * 4, f"{n.id}.maxs")
        lw.dma(False, pe, bmin, mins, 0, 1, nb, nb, n.id)
        lw.dma(False, pe, bmax, maxs, 0, 1, nb, nb, n.id)
        act = _qparams(lw, n, pe, bmin, bmax, nb, s_out, consumers)
        lw.phase()
        # phase 3: quantize the row blocks with the run-time pair
        for r0, r, pe in lw.spans_on_pes(quantize_spans(lw, act.data)):
            bi = lw.buf(pe, r * cols * 4, f"{n.id}.x32")
            lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
            bq = lw.buf(pe, 8, f"{n.id}.qparams")
            lw.dma(False, pe, bq, act.qparams, 0, 1, 2, 2, n.id)
            _quantize_block(lw, n, pe, bi, bq, r, cols, act.data, r0)
    lw.phase()
    _drop(lw, n.outputs[0])
    _drop(lw, n.outputs[2])
    return True


def lower_matmul_integer(lw: Lowering, n: LayerIR) -> bool:
    """Tile a MATMUL_INTEGER → Cast → Mul chain on a tiled DYNAMIC_QUANTIZE (module doc):
    the lowering plan names it; its DYNAMIC_QUANTIZE stored the int8 data, the run-time
    pair and this layer's zero-point term in scratches (`_qparams`), found in the memory
    plan by their keys."""
    plan = lw.lowering_plan.integer_matmuls.get(n.id)
    if plan is None:
        return False
    dq = lw.g.tensors[n.inputs[0]].producer
    data = lw.plan.allocations[f"{n.inputs[0]}@int8"].placement()
    corr = lw.plan.allocations[f"{n.id}@zpcorr"].placement()
    assert dq is not None and f"{dq}@qparams" in lw.plan.allocations
    wq = plan.weight
    wp = TeWeight(None, None, 8, wq.astype(np.int64).sum(axis=0),
                  values(f"{n.inputs[1]}@int8c", wq.astype(np.int8), "int8", n.inputs[1]))
    x = PreparedX(data, None, 0)
    if not gemm(lw, n, x, n.inputs[1], None, plan.out_tid, "int",
                dyn=DynamicGemm(wp, corr, lw.placement(plan.scale_tid))):
        # the quantized data exists only as the TE reads it: no whole-layer fallback
        raise ValueError(f"{n.id}: the integer GEMM on a tiled dynamic quantization "
                         "cannot be tiled")
    _drop(lw, n.outputs[0])
    _drop(lw, plan.cast.outputs[0])
    return True
