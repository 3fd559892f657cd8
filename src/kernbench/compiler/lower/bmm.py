"""MATMUL (batched, both operands activations) as GEMM tiles spread over the PEs.

What the attention matcher does not take — a batched matmul of two activations, or one
whose right operand is computed (a dequantized weight) — runs as output tiles, not as one
whole layer on one PE. Per batch index (ONNX broadcasting over the leading dims) and
output tile (tm × tn, round-robin over PEs), a K loop: 2-D DMAs load the A rows and B
rows with their strides, in integer mode VE_QUANTIZE makes both int8 with their static
per-tensor scales (calibrated by the quantize pass, as the interpreter's `matmul`),
TE_GEMM_TILE accumulates; then VE_DEQUANTIZE by s_a·s_b (integer mode) and a 2-D DMA
stores the tile. fp32 mode multiplies the fp32 operands as they are. Other modes (fp16,
4-bit) and non-unit inner strides return False: the layer runs as a layer op.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.blocks import batch_offset, out_tiles
from kernbench.compiler.lower.bmm_tiling import BmmTiles, bmm_tiling
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR


def _load(lw: Lowering, n: LayerIR, pe: int, p: Placement, off: int, rows: int, cols: int,
          scale: float | None, tag: str) -> Buf:
    """rows × cols of operand p at element `off` into TCM, quantized to int8 if `scale`."""
    b32 = lw.buf(pe, rows * cols * 4, f"{n.id}.{tag}32")
    lw.dma(False, pe, b32, p, off, rows, cols, p.strides[-2], n.id)
    if scale is None:
        return b32
    bq = lw.buf(pe, rows * cols, f"{n.id}.{tag}q")
    lw.op("VE_QUANTIZE_TILE", pe, n.id,
          {"length": cols, "rows": rows, "qbits_activation": 32, "out_qbits": 8,
           "scale": scale, "zero_point": 0},
          reads=[("in", b32)], writes=[("out", bq)], frees=[b32])
    return bq


def _tile(lw: Lowering, n: LayerIR, t: BmmTiles, idx: tuple[int, ...], m0: int, n0: int,
          tm: int, tn: int) -> None:
    """One output tile: the K loop, the scale, the store."""
    pe = lw.next_pe()
    k = t.a.shape[-1]
    sa, sb = t.scales if t.scales is not None else (None, None)
    bits = 8 if t.scales is not None else 32
    acc = lw.buf(pe, tm * tn * 4, f"{n.id}.acc")
    a_off, b_off = batch_offset(t.a, idx), batch_offset(t.b, idx)
    for i, k0 in enumerate(range(0, k, t.tk)):
        tk = min(t.tk, k - k0)
        ba = _load(lw, n, pe, t.a, a_off + m0 * t.a.strides[-2] + k0, tm, tk, sa, "a")
        bb = _load(lw, n, pe, t.b, b_off + k0 * t.b.strides[-2] + n0, tk, tn, sb, "b")
        lw.op("TE_GEMM_TILE", pe, n.id,
              {"m": tm, "n": tn, "k": tk, "qbits_weight": bits, "qbits_activation": bits,
               "ofm_qbits": 32, "accumulate": i > 0},
              reads=[("ifm", ba), ("wgt", bb)] + ([("ofm", acc)] if i else []),
              writes=[("ofm", acc)], frees=[ba, bb])
    res = acc
    if t.scales is not None:
        res = lw.buf(pe, tm * tn * 4, f"{n.id}.o32")
        lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
              {"length": tn, "rows": tm, "qbits_activation": 32, "out_qbits": 32,
               "scale": float(np.float32(sa) * np.float32(sb)), "in_dtype": "int32"},
              reads=[("in", acc)], writes=[("out", res)], frees=[acc])
    o = t.out
    o_off = batch_offset(o, idx) + m0 * o.strides[-2] + n0
    lw.dma(True, pe, res, o, o_off, tm, tn, o.strides[-2], n.id, frees=[res])


def lower_bmm(lw: Lowering, n: LayerIR) -> bool:
    """Tile a MATMUL (see the module doc); False: it runs whole as a layer op."""
    t = bmm_tiling(lw, n)
    if t is None:
        return False
    for idx, m0, n0, tm, tn in out_tiles(t.out.shape, t.tm, t.tn):
        _tile(lw, n, t, idx, m0, n0, tm, tn)
    return True


__all__ = ["lower_bmm"]
