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

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.qlinear_tiling import quant_tiling
from kernbench.ir.model import LayerIR

#: smallest block worth its own commands. Measured on the QOperator zoo CNNs: 1024
#: elements give the roofline of one block per PE (within 1-5%) with a quarter of the
#: entries on base; 4096, the clamp's minimum, lost 10% on mobilenet_qoperator (small)
QMIN_ELEMS = 1024


def lower_quant_rows(lw: Lowering, n: LayerIR) -> bool:
    """Tile a per-tensor QUANTIZE (fp32 → 8-bit) or DEQUANTIZE (8-bit → fp32); False when
    it must run whole."""
    t = quant_tiling(lw, n)
    if t is None:
        return False
    scale, zp, x, y = t
    total = int(np.prod(x.shape)) if x.shape else 1
    # element-wise with scalar parameters: flat blocks, one per PE down to QMIN_ELEMS
    # (tiny blocks cost more in commands than they save), at most one fp32 bank
    per = max(1, min(total, lw.bank // 4, max(QMIN_ELEMS, math.ceil(total / lw.n_pes))))
    fields = {"rows": 1, "qbits_activation": QBITS_OF[x.dtype],
              "out_qbits": QBITS_OF[y.dtype], "scale": scale, "zero_point": zp}
    if n.op_type == "QUANTIZE":
        opcode = "VE_QUANTIZE_TILE"
        if y.dtype == "uint8":
            fields["out_signed"] = False
    else:
        opcode = "VE_DEQUANTIZE_TILE"
        fields["in_dtype"] = x.dtype
    for e0 in range(0, total, per):
        e = min(per, total - e0)
        pe = lw.next_pe()
        bi = lw.buf(pe, e * ITEMSIZE[x.dtype], f"{n.id}.in")
        lw.dma(False, pe, bi, x, e0, 1, e, e, n.id)
        bo = lw.buf(pe, e * ITEMSIZE[y.dtype], f"{n.id}.out")
        lw.op(opcode, pe, n.id, dict(fields, length=e, **lw.engines.ve(pe)),
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, e0, 1, e, e, n.id, frees=[bo])
    return True
