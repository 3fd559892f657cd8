"""QDQ (a QuantizeLinear → DequantizeLinear pair, fake quantization) in row blocks.

Per-tensor 8-bit QDQ with a constant scale and zero point (int8 or uint8): the tensor is
cut into row blocks over its last axis, spread over PEs; per block: DMA in, VE_QUANTIZE
(scale, zero point), VE_DEQUANTIZE (scale, zero point), DMA out. A uint8 QDQ is computed
in int8 shifted by -128 (both zero points shifted: exact, ADR-0704). A QDQ whose every
consumer is an integer GEMM needs no operation at all (`gemm.qdq_bypassed`); others
(per-channel, blocked, non-contiguous) run as a layer op.
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.rowwise import rows_cols
from kernbench.compiler.quantize import qdq_source
from kernbench.ir.model import LayerIR


def _params(lw: Lowering, n: LayerIR) -> tuple[float, int] | None:
    """(scale, zero point of the int8 computation) of a per-tensor 8-bit QDQ, or None."""
    if qdq_source(lw.g, n.outputs[0]) is None:
        return None
    scale = float(np.asarray(lw.g.weights[n.inputs[1]], np.float32).reshape(()))
    zp = (int(np.asarray(lw.g.weights[n.inputs[2]]).reshape(()))
          if len(n.inputs) > 2 and n.inputs[2] else 0)
    if n.attributes.get("dtype") == "uint8":
        zp -= 128
    return scale, zp


def lower_qdq(lw: Lowering, n: LayerIR) -> bool:
    """Tile a per-tensor QDQ (module doc); False when it must run whole."""
    qp = _params(lw, n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if qp is None or y is None or x.dtype != "fp32" or y.dtype != "fp32" \
            or not x.contiguous or not y.contiguous or x.shape != y.shape \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    scale, zp = qp
    rows, cols = rows_cols(x)
    per = max(1, min(rows, lw.bank // (cols * 4), math.ceil(rows / lw.n_pes)))
    for r0 in range(0, rows, per):
        r = min(per, rows - r0)
        pe = lw.next_pe()
        bi = lw.buf(pe, r * cols * 4, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
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
        lw.dma(True, pe, bi, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bi])
    return True
