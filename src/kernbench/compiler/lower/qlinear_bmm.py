"""QLINEAR_MATMUL of two activations (attention's Q·Kᵀ and P·V quantized by onnxruntime)
as batched GEMM tiles.

With both operands computed at run time, the zero-point terms −z_b·rowsum(A) and
−z_a·colsum(B) are not constants, so they cannot ride in the TE's bias. Instead each
loaded operand block is centered on the vector engine: VE_DEQUANTIZE_TILE with scale 1
and the operand's zero point turns an 8-bit block into a − z_a in fp16. That is exact,
because |a − z| ≤ 255 < 2^11. The TE then multiplies the fp16 blocks and accumulates in
fp32. Every product and every partial sum is an integer below 2^24 when
K · max|a − z_a| · max|b − z_b| < 2^24, checked at compile time. Under that bound the fp32
accumulator holds exactly the int32 the interpreter computes, in any summation order, and
VE_REQUANTIZE_TILE (multiplier s_a·s_b / s_y) gives bit-identical outputs. Larger K runs
as a whole-layer op.

Tiles: per batch index (ONNX broadcasting over the leading dims) and output block
(tm × tn), round-robin over the PEs, a K loop of 2-D DMAs of both operands with their
strides.
"""

from __future__ import annotations

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.blocks import batch_offset, out_tiles
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.qlinear import lower_qlinear_matmul, requant
from kernbench.compiler.lower.qlinear_tiling import qlinear_bmm_tiling
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR


def _load(lw: Lowering, n: LayerIR, pe: int, p: Placement, off: int, rows: int, cols: int,
          z: int, tag: str) -> Buf:
    """rows × cols of 8-bit operand p at element `off`, centered (q − z) into fp16."""
    b8 = lw.buf(pe, rows * cols, f"{n.id}.{tag}8")
    lw.dma(False, pe, b8, p, off, rows, cols, p.strides[-2], n.id)
    b16 = lw.buf(pe, rows * cols * 2, f"{n.id}.{tag}16")
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": cols, "rows": rows, "qbits_activation": 8, "out_qbits": 16,
           "scale": 1.0, "zero_point": z, "in_dtype": p.dtype, **lw.engines.ve(pe)},
          reads=[("in", b8)], writes=[("out", b16)], frees=[b8])
    return b16


def _tile(lw: Lowering, n: LayerIR, plan: tuple, idx: tuple[int, ...], m0: int, n0: int,
          tm: int, tn: int) -> None:
    """One output block: the K loop on centered fp16 blocks, requantize, store."""
    a, b, out, za, zb, rq, _, _, tk_max = plan
    pe = lw.next_pe()
    k = a.shape[-1]
    acc = lw.buf(pe, tm * tn * 4, f"{n.id}.acc")
    a_off, b_off = batch_offset(a, idx), batch_offset(b, idx)
    for i, k0 in enumerate(range(0, k, tk_max)):
        tk = min(tk_max, k - k0)
        ba = _load(lw, n, pe, a, a_off + m0 * a.strides[-2] + k0, tm, tk, za, "a")
        bb = _load(lw, n, pe, b, b_off + k0 * b.strides[-2] + n0, tk, tn, zb, "b")
        lw.op("TE_GEMM_TILE", pe, n.id,
              {"m": tm, "n": tn, "k": tk, "qbits_weight": 16, "qbits_activation": 16,
               "ofm_qbits": 32, "accumulate": i > 0, **lw.engines.te(0)},
              reads=[("ifm", ba), ("wgt", bb)] + ([("ofm", acc)] if i else []),
              writes=[("ofm", acc)], frees=[ba, bb])
    bm = lw.buf(pe, tn * 4, f"{n.id}.qmult")
    lw.dma(False, pe, bm, rq.mult, n0, 1, tn, tn, n.id, role="weight")
    # in place; the fp32 accumulator holds exact integers (the bound in `qlinear_tiling`)
    lw.op("VE_REQUANTIZE_TILE", pe, n.id,
          {"length": tn, "rows": tm, **rq.fields(), "in_dtype": "float32",
           **lw.engines.ve(pe)},
          reads=[("in", acc), ("multiplier", bm)], writes=[("out", acc)], frees=[bm])
    o_off = batch_offset(out, idx) + m0 * out.strides[-2] + n0
    lw.dma(True, pe, acc, out, o_off, tm, tn, out.strides[-2], n.id, frees=[acc])


def lower_qlinear_bmm(lw: Lowering, n: LayerIR) -> bool:
    """Tile a QLINEAR_MATMUL of two activations; False: it runs whole."""
    t = qlinear_bmm_tiling(lw, n)
    if t is None:
        return False
    plan = (t.a, t.b, t.out, t.za, t.zb, requant(lw, n, *t.scalars, t.out.shape[-1]), t.tm,
            t.tn, t.tk)
    for idx, m0, n0, tm, tn in out_tiles(plan[2].shape, plan[6], plan[7]):
        _tile(lw, n, plan, idx, m0, n0, tm, tn)
    return True


def lower_any_qlinear_matmul(lw: Lowering, n: LayerIR) -> bool:
    """QLINEAR_MATMUL: GEMM tiles with a constant B (`qlinear`), batched tiles for two
    activations (here); False: it runs whole."""
    return lower_qlinear_matmul(lw, n) or lower_qlinear_bmm(lw, n)
