"""Standalone per-tensor QUANTIZE / DEQUANTIZE (QuantizeLinear / DequantizeLinear at the
edges of a QOperator region) in flat blocks.

QUANTIZE: fp32 → int8 / uint8 (VE_QUANTIZE_TILE, ``out_signed`` false for uint8);
DEQUANTIZE: int8 / uint8 → fp32 (VE_DEQUANTIZE_TILE with the scalar scale and zero point,
``in_dtype`` the integer type). The parameters are scalars, so the tensor is cut into flat
blocks (like a clamp's), spread over the PEs: DMA in, the VE op, DMA out — the same numerics the interpreter runs
(`numerics.quant`). Anything else (per-channel or blocked parameters, other bit widths,
constants, non-contiguous placements) runs as a layer op.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.qlinear_tiling import quant_blocks, quant_tiling
from kernbench.ir.model import LayerIR


def lower_quant_rows(lw: Lowering, n: LayerIR) -> bool:
    """Tile a per-tensor QUANTIZE (fp32 → 8-bit) or DEQUANTIZE (8-bit → fp32); False when
    it must run whole."""
    t = quant_tiling(lw, n)
    if t is None:
        return False
    scale, zp, x, y = t
    fields = {"rows": 1, "qbits_activation": QBITS_OF[x.dtype],
              "out_qbits": QBITS_OF[y.dtype], "scale": scale, "zero_point": zp}
    if n.op_type == "QUANTIZE":
        opcode = "VE_QUANTIZE_TILE"
        if y.dtype == "uint8":
            fields["out_signed"] = False
    else:
        opcode = "VE_DEQUANTIZE_TILE"
        fields["in_dtype"] = x.dtype
    for e0, e in quant_blocks(lw, x):
        pe = lw.next_pe()
        bi = lw.buf(pe, e * ITEMSIZE[x.dtype], f"{n.id}.in")
        lw.dma(False, pe, bi, x, e0, 1, e, e, n.id)
        bo = lw.buf(pe, e * ITEMSIZE[y.dtype], f"{n.id}.out")
        lw.op(opcode, pe, n.id, dict(fields, length=e, **lw.engines.ve(pe)),
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, e0, 1, e, e, n.id, frees=[bo])
    return True
