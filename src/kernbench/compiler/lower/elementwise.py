"""Element-wise layers with numpy broadcasting (ELEMENTWISE, ADD / MUL the row-wise
lowering does not take, and EXPAND: the identity broadcast) as VE_ELEMENTWISE_TILE blocks, ReLU / Clip as VE_CLIP_TILE blocks
(`lower_clamp`), and CUMSUM on the last axis as VE_CUMSUM_TILE row blocks.

The blocks are `ew_tiling`'s (a function of the graph and the memory plan, which the plan
pass asks too): each input's part of a block is one contiguous run of that input, DMAed as
is, and the tile broadcasts it; each block runs on a PE of the cube that holds its output
(`pe_near`), a layer of one block on the PE the lowering plan gives it (`lone`). A layer
`ew_tiling` refuses returns False (it runs whole).
"""

from __future__ import annotations

import math

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.blocks import one_tile_spread
from kernbench.compiler.lower.clamp import clip_fields
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.ew_tiling import Block, clamp_tiling, cumsum_tiling, ew_tiling
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_KINDS, node_attrs


def ew_cost(op: str) -> str:
    """The pe_math entry that prices ELEMENTWISE kind `op` per element (its kind class's,
    `kernbench.ir.ops.elementwise`)."""
    return EW_KINDS[op].cost


def operand_run(shape: tuple[int, ...], a: int, b: Block) -> tuple[int, list[int]]:
    """(element offset, tile shape) of an input of (padded) `shape` under block `b`."""
    k = len(shape)
    strides = [math.prod(shape[i + 1:]) for i in range(k)]
    off = sum((i if d > 1 else 0) * s for i, d, s in zip(b[1], shape, strides, strict=False))
    if shape[a] > 1:
        off += b[2] * strides[a]
        return off, [b[3], *shape[a + 1:]]
    return off, [1, *shape[a + 1:]]


def lower_elementwise(lw: Lowering, n: LayerIR) -> bool:
    """An element-wise layer as broadcasting VE_ELEMENTWISE_TILE blocks (False: it runs
    whole)."""
    t = ew_tiling(lw, n)
    if t is None:
        return False
    spec, y, shape, ins, a, bl = t
    spec = dict(spec, cost=spec.get("cost") or ew_cost(spec["op"]))
    roles = ("in", "in2", "in3")
    for b in bl:
        out_shape = [b[3], *shape[a + 1:]]
        cnt = math.prod(out_shape)
        pe = lw.pe_near(y, b[0])
        pe = lw.lone_pe(n.id, pe) if len(bl) == 1 else pe
        fields = dict(spec, out_shape=out_shape, out_dtype=y.dtype, **lw.engines.ve(pe))
        reads, frees = [], []
        for role, (p, pshape) in zip(roles, ins, strict=False):
            off, tshape = operand_run(pshape, a, b)
            e = math.prod(tshape)
            bi = lw.buf(pe, e * ITEMSIZE[p.dtype], f"{n.id}.{role}")
            lw.dma(False, pe, bi, p, off, 1, e, e, n.id,
                   role="weight" if lw.g.tensors[n.inputs[roles.index(role)]].const
                   else "activation")
            fields[f"{role}_shape"] = tshape
            fields[f"{role}_dtype"] = p.dtype
            reads.append((role, bi))
            frees.append(bi)
        bo = lw.buf(pe, cnt * ITEMSIZE[y.dtype], f"{n.id}.out")
        lw.op("VE_ELEMENTWISE_TILE", pe, n.id, fields, reads=reads, writes=[("out", bo)],
              frees=frees)
        lw.dma(True, pe, bo, y, b[0], 1, cnt, cnt, n.id, frees=[bo])
    return True


def lower_cumsum(lw: Lowering, n: LayerIR) -> bool:
    """CUMSUM along the last axis as VE_CUMSUM_TILE row blocks (False: another axis, or
    operands the tile cannot read)."""
    t = cumsum_tiling(lw, n)
    if t is None:
        return False
    x, y, cols = t.x, t.y, t.cols
    isz = ITEMSIZE[y.dtype]
    a = node_attrs(n)
    fields = {"length": cols, "out_dtype": y.dtype,
              "exclusive": bool(a.exclusive), "reverse": bool(a.reverse)}
    for r0, r, pe in one_tile_spread(lw, n.id, lw.spans_on_pes(t.spans)):
        bi = lw.buf(pe, r * cols * isz, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        bo = lw.buf(pe, r * cols * isz, f"{n.id}.out")
        lw.op("VE_CUMSUM_TILE", pe, n.id, dict(fields, rows=r, **lw.engines.ve(pe)),
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True


def lower_clamp(lw: Lowering, n: LayerIR) -> bool:
    """A clamp as flat blocks (`clamp_tiling`; False: untileable). One a conv's epilogue
    computes (the lowering plan's `clamps`) is not lowered at all."""
    t = clamp_tiling(lw, n)
    if t is None:
        return False
    b, x, y, total, per = t
    for e0 in t.starts():
        e = min(per, total - e0)
        pe = lw.next_pe()
        bi = lw.buf(pe, e * ITEMSIZE[x.dtype], f"{n.id}.in")
        bo = lw.buf(pe, e * ITEMSIZE[y.dtype], f"{n.id}.out")
        lw.dma(False, pe, bi, x, e0, 1, e, e, n.id)
        f = clip_fields(b, 1, e, QBITS_OF[x.dtype])
        f["out_qbits"] = QBITS_OF[y.dtype]
        lw.op("VE_CLIP_TILE", pe, n.id, f, reads=[("in", bi)], writes=[("out", bo)],
              frees=[bi])
        lw.dma(True, pe, bo, y, e0, 1, e, e, n.id, frees=[bo])
    return True
