"""QDQ (a QuantizeLinear → DequantizeLinear pair, fake quantization) in row blocks.

Per-tensor 8-bit QDQ with a constant scale and zero point (int8 or uint8): the tensor is
cut into row blocks over its last axis, spread over PEs; per block: DMA in, VE_QUANTIZE
(scale, zero point), VE_DEQUANTIZE (scale, zero point), DMA out. A uint8 QDQ is computed
in int8 shifted by -128 (both zero points shifted: exact). A QDQ whose every
consumer is an integer GEMM needs no operation at all (`activation.qdq_bypassed`); others
(per-channel, blocked, non-contiguous) run as a layer op.

A head transpose next to a QDQ (onnxruntime's quantize_static puts QDQs between the head
split and attention's matmuls, and after P·V) folds into the QDQ's DMAs: the
QDQ is element-wise with one scale, so QDQ(transpose(x)) = transpose(QDQ(x)) exactly.
- input (0, 2, 1, 3) of a (B, S, H, D) source: per (b, h), row blocks of S read with a
  strided DMA (row stride H·D);
- input (0, 2, 3, 1) (Kᵀ): per (b, h), blocks of S rows read the same way, QDQ, then
  VE_TRANSPOSE_TILE to (D, rows), stored as D strided rows of the (B, H, D, S) output;
- output (0, 2, 1, 3): the QDQ's rows stored strided into the transpose's (B, S, H, D)
  output.
The transpose gets no operation and its (or the QDQ's) intermediate tensor no storage.
"""

from __future__ import annotations

from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.qdq_layout import (
    QdqLayout,
    layout_blocks,
    plain_rows,
    qdq_layout,
    qdq_params,
    qdq_tiled,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR


def _qdq_ops(lw: Lowering, n: LayerIR, pe: int, bi: Buf, r: int, cols: int,
             qp: tuple[float, int]) -> None:
    """VE_QUANTIZE then VE_DEQUANTIZE of an r × cols fp32 block, in place."""
    scale, zp = qp
    bq = lw.buf(pe, r * cols, f"{n.id}.q")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": cols, "rows": r, "qbits_activation": 32, "out_qbits": 8,
           "scale": scale, "zero_point": zp},
          reads=[("in", bi)], writes=[("out", bq)])
    # in place: the real values overwrite the fp32 input block they came from
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": cols, "rows": r, "qbits_activation": 8, "out_qbits": 32,
           "scale": scale, "zero_point": zp},
          reads=[("in", bq)], writes=[("out", bi)], frees=[bq])


def _lower_with_layout(lw: Lowering, n: LayerIR, lay: QdqLayout, qp: tuple[float, int]) -> None:
    """Per (b, h) of the (B, H, ·, ·) side, row blocks of the sequence: the (B, S, H, D)
    side is read / written with strided DMAs (module doc)."""
    st = lay.strided
    s_len, d = st.shape[1], st.shape[3]
    for b, h, s0, s in layout_blocks(lw, lay):
        base = b * st.strides[0] + h * st.strides[2]
        pe = lw.next_pe()
        bi = lw.buf(pe, s * d * 4, f"{n.id}.in")
        o = lay.other
        obase = b * o.strides[0] + h * o.strides[1]
        if lay.input_side:
            lw.dma(False, pe, bi, st, base + s0 * st.strides[1], s, d, st.strides[1],
                   n.id)
        else:
            lw.dma(False, pe, bi, o, obase + s0 * d, 1, s * d, s * d, n.id)
        _qdq_ops(lw, n, pe, bi, s, d, qp)
        if not lay.input_side:
            lw.dma(True, pe, bi, st, base + s0 * st.strides[1], s, d, st.strides[1],
                   n.id, frees=[bi])
        elif lay.key_t:  # (s, d) → (d, s): D rows of the (B, H, D, S) output
            bt = lw.buf(pe, s * d * 4, f"{n.id}.t")
            lw.op("VE_TRANSPOSE_TILE", pe, n.id,
                  {"rows": s, "cols": d, "qbits_activation": 32},
                  reads=[("in", bi)], writes=[("out", bt)], frees=[bi])
            lw.dma(True, pe, bt, o, obase + s0, d, s, s_len, n.id, frees=[bt])
        else:
            lw.dma(True, pe, bi, o, obase + s0 * d, 1, s * d, s * d, n.id, frees=[bi])


def _drop(lw: Lowering, tid: str) -> None:
    """A tensor no tile stores: no storage, no view in memory.json."""
    p = lw.plan.placements.pop(tid, None)
    if p is not None and not any(q.key == p.key for q in lw.plan.placements.values()):
        lw.plan.allocations.pop(p.key, None)


def lower_qdq(lw: Lowering, n: LayerIR) -> bool:
    """Tile a per-tensor QDQ (module doc); False when it must run whole."""
    lay = qdq_layout(lw, n)
    planned = lw.lowering_plan
    through = {t for t, q in (*planned.read_through.items(), *planned.written_through.items())
               if q == n.id}
    if through != ({lay.transpose.id} if lay is not None else set()):
        raise RuntimeError(f"{n.id}: the lowering plan folds transposes {sorted(through)} "
                           "into this QDQ, yet its tiles fold "
                           f"{lay.transpose.id if lay is not None else 'none'}")
    if lay is not None:
        qp = qdq_params(lw, n)
        assert qp is not None
        _lower_with_layout(lw, n, lay, qp)
        _drop(lw, lay.transpose.outputs[0] if lay.input_side else n.outputs[0])
        return True
    qp = qdq_params(lw, n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if not qdq_tiled(lw, n):
        return False
    assert qp is not None and y is not None
    cols = rows_cols(x)[1]
    for r0, r in plain_rows(lw, x):
        pe = lw.next_pe()
        bi = lw.buf(pe, r * cols * 4, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        _qdq_ops(lw, n, pe, bi, r, cols, qp)
        lw.dma(True, pe, bi, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bi])
    return True
