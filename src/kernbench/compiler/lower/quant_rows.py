"""Standalone per-tensor QUANTIZE / DEQUANTIZE (QuantizeLinear / DequantizeLinear at the
edges of a QOperator region, ADR-0709) in row blocks.

QUANTIZE: fp32 → int8 / uint8 (VE_QUANTIZE_TILE, ``out_signed`` false for uint8);
DEQUANTIZE: int8 / uint8 → fp32 (VE_DEQUANTIZE_TILE with the scalar scale and zero point,
``in_dtype`` the integer type). The tensor is cut into row blocks over its last axis,
spread over the PEs: DMA in, the VE op, DMA out — the same numerics the interpreter runs
(`numerics.quant`). Anything else (per-channel or blocked parameters, other bit widths,
constants, non-contiguous placements) runs as a layer op.
"""

from __future__ import annotations

import math

from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.qlinear import scalar
from kernbench.compiler.lower.rowwise import rows_cols
from kernbench.ir.model import LayerIR

INT8 = ("int8", "uint8")


def _per_tensor(lw: Lowering, n: LayerIR) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor quantization with constant parameters."""
    if len(n.inputs) < 2 or n.attributes.get("axis") is not None \
            or n.attributes.get("block_size"):
        return None
    s = scalar(lw, n.inputs[1])
    z = scalar(lw, n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else 0
    if s is None or z is None or float(s) <= 0:
        return None
    return float(s), int(z)


def lower_quant_rows(lw: Lowering, n: LayerIR) -> bool:
    """Tile a per-tensor QUANTIZE (fp32 → 8-bit) or DEQUANTIZE (8-bit → fp32); False when
    it must run whole."""
    qp = _per_tensor(lw, n)
    if qp is None or lw.g.tensors[n.inputs[0]].const:
        return False
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    want = ("fp32", INT8) if n.op_type == "QUANTIZE" else (INT8, ("fp32",))
    if y is None or x.dtype not in want[0] or y.dtype not in want[1] \
            or not x.contiguous or not y.contiguous or x.shape != y.shape:
        return False
    scale, zp = qp
    rows, cols = rows_cols(x)
    if cols * 4 > lw.bank:
        return False
    per = max(1, min(rows, lw.bank // (cols * 4), math.ceil(rows / lw.n_pes)))
    fields = {"length": cols, "qbits_activation": QBITS_OF[x.dtype],
              "out_qbits": QBITS_OF[y.dtype], "scale": scale, "zero_point": zp}
    if n.op_type == "QUANTIZE":
        opcode = "VE_QUANTIZE_TILE"
        if y.dtype == "uint8":
            fields["out_signed"] = False
    else:
        opcode = "VE_DEQUANTIZE_TILE"
        fields["in_dtype"] = x.dtype
    for r0 in range(0, rows, per):
        r = min(per, rows - r0)
        pe = lw.next_pe()
        bi = lw.buf(pe, r * cols * QBITS_OF[x.dtype] // 8, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        bo = lw.buf(pe, r * cols * QBITS_OF[y.dtype] // 8, f"{n.id}.out")
        lw.op(opcode, pe, n.id, dict(fields, rows=r, **lw.engines.ve(pe)),
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True
