"""Element-wise layers with numpy broadcasting (ELEMENTWISE, and ADD / MUL the row-wise
lowering does not take) as VE_ELEMENTWISE_TILE blocks, ReLU / Clip as VE_CLIP_TILE blocks
(`lower_clamp`), and CUMSUM on the last axis as VE_CUMSUM_TILE row blocks.

Blocks of the output: all axes after a split axis `a` whole, a range along `a`, fixed
indices on the axes before it (`blocks`). Each input's part of a block is then one
contiguous run of that input (its broadcast axes take index 0 and length 1), DMAed as is:
the tile broadcasts it. Blocks are at most one TCM bank and at least `MIN_BLOCK_ELEMS`
elements (a mask of 16 × 16 is one tile; a big one spreads over every PE); each block runs
on a PE of the cube that holds its output (`pe_near`). A layer with a strided or quantized
operand, or an element type the tile does not name, returns False (it runs whole).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from kernbench.cmdq.opcodes.ve_elementwise import ARITY
from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.blocks import one_tile_spread
from kernbench.compiler.lower.clamp import clamp_bounds, clip_fields
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.window import MIN_BLOCK_ELEMS
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_ATTRS, EW_KINDS, node_attrs
from kernbench.numerics.dtypes import canon

#: element types VE_ELEMENTWISE_TILE / VE_CUMSUM_TILE name
ELEM_TYPES = ("fp32", "fp16", "bf16", "int64", "int32", "int16", "int8", "uint8", "bool")

#: one output block: (element offset in the output, fixed leading indices, first index
#: along the split axis, its length)
Block = tuple[int, tuple[int, ...], int, int]


def ew_cost(op: str) -> str:
    """The pe_math entry that prices ELEMENTWISE kind `op` per element (its kind class's,
    `kernbench.ir.ops.elementwise`)."""
    return EW_KINDS[op].cost


def blocks(shape: tuple[int, ...], per: int) -> tuple[int, list[Block]]:
    """The split axis and the output blocks of at most `per` elements (see the module
    docstring)."""
    k = len(shape)
    a = next(i for i in range(k) if math.prod(shape[i + 1:]) <= per)
    inner = math.prod(shape[a + 1:])
    j = max(1, min(shape[a], per // inner))
    strides = [math.prod(shape[i + 1:]) for i in range(k)]
    out = []
    for lead in itertools.product(*(range(d) for d in shape[:a])):
        base = sum(i * s for i, s in zip(lead, strides, strict=False))
        for j0 in range(0, shape[a], j):
            out.append((base + j0 * strides[a], tuple(lead), j0, min(j, shape[a] - j0)))
    return a, out


def operand_run(shape: tuple[int, ...], a: int, b: Block) -> tuple[int, list[int]]:
    """(element offset, tile shape) of an input of (padded) `shape` under block `b`."""
    k = len(shape)
    strides = [math.prod(shape[i + 1:]) for i in range(k)]
    off = sum((i if d > 1 else 0) * s for i, d, s in zip(b[1], shape, strides, strict=False))
    if shape[a] > 1:
        off += b[2] * strides[a]
        return off, [b[3], *shape[a + 1:]]
    return off, [1, *shape[a + 1:]]


def _operands(lw: Lowering, n: LayerIR,
              rank: int) -> list[tuple[Placement, tuple[int, ...]]] | None:
    """Each input's placement and shape padded to `rank` (None: an input the tile cannot
    read: absent, strided, or of an element type it does not name).
    A quantized constant is read as its real values (`Lowering.value_placement`)."""
    out = []
    for tid in n.inputs:
        if not tid:
            return None
        p = lw.value_placement(tid)  # a quantized constant as its real values
        t = lw.g.tensors[tid]
        real = "fp32" if t.const and t.quant is not None else t.dtype
        if not p.contiguous or p.dtype not in ELEM_TYPES or canon(p.dtype) != canon(real) \
                or len(p.shape) > rank:
            return None
        out.append((p, (1,) * (rank - len(p.shape)) + tuple(p.shape)))
    return out


def _spec(n: LayerIR) -> dict[str, Any] | None:
    """The tile's op fields, or None for an op it does not compute."""
    op = {"ADD": "add", "MUL": "mul"}.get(n.op_type) or node_attrs(n).op
    if op not in ARITY or not ARITY[op][0] <= len(n.inputs) <= ARITY[op][1]:
        return None
    f: dict[str, Any] = {"op": op}
    if op == "cast":
        to = node_attrs(n).to
        if to not in ELEM_TYPES:
            return None
        f["to"] = to
    # the ONNX attributes the node sets (one it leaves out is the kernel's default)
    a = node_attrs(n) if n.op_type == "ELEMENTWISE" else None
    attrs = {k: getattr(a, k) for k in EW_ATTRS if k in n.attributes}
    if attrs:
        f["attrs"] = attrs
    return f


def lower_elementwise(lw: Lowering, n: LayerIR) -> bool:
    """An element-wise layer as broadcasting VE_ELEMENTWISE_TILE blocks (False: it runs
    whole)."""
    spec = _spec(n)
    y = lw.plan.placements.get(n.outputs[0])
    if spec is None or y is None or not y.contiguous or y.dtype not in ELEM_TYPES \
            or canon(y.dtype) != canon(lw.g.tensors[n.outputs[0]].dtype):
        return False
    shape = tuple(y.shape) or (1,)
    ins = _operands(lw, n, len(shape))
    if ins is None:
        return False
    isz = max([ITEMSIZE[y.dtype]] + [ITEMSIZE[p.dtype] for p, _ in ins])
    total = math.prod(shape)
    per = max(1, min(lw.bank // isz, max(MIN_BLOCK_ELEMS, math.ceil(total / lw.n_pes))))
    a, bl = blocks(shape, per)
    spec["cost"] = ew_cost(spec["op"])
    roles = ("in", "in2", "in3")
    for b in bl:
        out_shape = [b[3], *shape[a + 1:]]
        cnt = math.prod(out_shape)
        pe = lw.pe_near(y, b[0])
        pe = lw.lone_pe(pe) if len(bl) == 1 else pe
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
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or not x.shape or not x.contiguous or not y.contiguous \
            or x.shape != y.shape or x.dtype != y.dtype or y.dtype not in ELEM_TYPES \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    a = node_attrs(n)
    if int(a.axis) % len(x.shape) != len(x.shape) - 1:
        return False
    cols = x.shape[-1]
    rows = int(np.prod(x.shape[:-1])) if len(x.shape) > 1 else 1
    isz = ITEMSIZE[y.dtype]
    if cols * isz > lw.bank:
        return False
    fields = {"length": cols, "out_dtype": y.dtype,
              "exclusive": bool(a.exclusive), "reverse": bool(a.reverse)}
    for r0, r, pe in one_tile_spread(lw, lw.row_blocks(y, rows, cols, lw.bank // (cols * isz))):
        bi = lw.buf(pe, r * cols * isz, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        bo = lw.buf(pe, r * cols * isz, f"{n.id}.out")
        lw.op("VE_CUMSUM_TILE", pe, n.id, dict(fields, rows=r, **lw.engines.ve(pe)),
              reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True


def lower_clamp(lw: Lowering, n: LayerIR) -> bool:
    """A clamp as flat blocks (False: untileable). One a conv's epilogue computes (the
    lowering plan's `clamps`) is not lowered at all."""
    b = clamp_bounds(lw, n)
    if b is None:
        return False
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or x.dtype not in ("fp32", "fp16") or y.dtype not in ("fp32", "fp16") \
            or not x.contiguous or not y.contiguous or x.shape != y.shape \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    total = int(np.prod(x.shape)) if x.shape else 1
    # element-wise: flat blocks, one per PE down to MIN_BLOCK_ELEMS, at most one fp32 bank
    per = max(1, min(total, lw.bank // 4, max(MIN_BLOCK_ELEMS, math.ceil(total / lw.n_pes))))
    for e0 in range(0, total, per):
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
