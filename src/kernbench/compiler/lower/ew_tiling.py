"""How an element-wise layer tiles, as a function of the graph and the memory plan: the
blocks of a broadcasting ELEMENTWISE / ADD / MUL / EXPAND (`ew_tiling`), of a ReLU / Clip
(`clamp_tiling`) and of a CUMSUM (`cumsum_tiling`), or None when the layer runs whole.
The per-op lowering (`elementwise`) emits the tiles of these blocks; the plan pass asks
the same functions which layers make one tile (`lone_plan`).

Blocks of a broadcasting layer's output: all axes after a split axis `a` whole, a range
along `a`, fixed indices on the axes before it (`blocks`). Each input's part of a block is
then one contiguous run of that input (its broadcast axes take index 0 and length 1). Blocks
are at most one TCM bank and at least `MIN_BLOCK_ELEMS` elements (a mask of 16 × 16 is one
tile; a big one spreads over every PE). A layer with a strided or quantized operand, or an
element type the tile does not name, runs whole.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from kernbench.cmdq.opcodes.ve_elementwise import ARITY
from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.clamp import Bounds, clamp_bounds
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.window import MIN_BLOCK_ELEMS
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_ATTRS, node_attrs
from kernbench.numerics.dtypes import canon

#: element types VE_ELEMENTWISE_TILE / VE_CUMSUM_TILE name
ELEM_TYPES = ("fp32", "fp16", "bf16", "int64", "int32", "int16", "int8", "uint8", "bool")

#: one output block: (element offset in the output, fixed leading indices, first index
#: along the split axis, its length)
Block = tuple[int, tuple[int, ...], int, int]


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


def _spec(lw: Lowering, n: LayerIR) -> dict[str, Any] | None:
    """The tile's op fields, or None for an op it does not compute. An EXPAND is a cast to
    its own type (the identity) broadcast to the block, priced as a copy."""
    if n.op_type == "EXPAND":
        to = lw.g.tensors[n.outputs[0]].dtype
        return {"op": "cast", "to": to, "cost": "copy"} if to in ELEM_TYPES else None
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


class EwTiling(NamedTuple):
    """The tiles of a broadcasting element-wise layer: its op fields, output, output shape,
    inputs (placement, shape padded to the output's rank), split axis and blocks."""

    spec: dict[str, Any]
    y: Placement
    shape: tuple[int, ...]
    ins: list[tuple[Placement, tuple[int, ...]]]
    axis: int
    blocks: list[Block]


def ew_tiling(lw: Lowering, n: LayerIR) -> EwTiling | None:
    """The blocks of an element-wise layer with broadcasting (None: it runs whole)."""
    spec = _spec(lw, n)
    y = lw.plan.placements.get(n.outputs[0])
    if spec is None or y is None or not y.contiguous or y.dtype not in ELEM_TYPES \
            or canon(y.dtype) != canon(lw.g.tensors[n.outputs[0]].dtype):
        return None
    shape = tuple(y.shape) or (1,)
    ins = _operands(lw, n, len(shape))
    if ins is None:
        return None
    isz = max([ITEMSIZE[y.dtype]] + [ITEMSIZE[p.dtype] for p, _ in ins])
    total = math.prod(shape)
    per = max(1, min(lw.bank // isz, max(MIN_BLOCK_ELEMS, math.ceil(total / lw.n_pes))))
    a, bl = blocks(shape, per)
    return EwTiling(spec, y, shape, ins, a, bl)


class ClampTiling(NamedTuple):
    """The flat blocks of a ReLU / Clip: its bounds, input, output, elements a block."""

    bounds: Bounds
    x: Placement
    y: Placement
    total: int
    per: int

    def starts(self) -> range:
        """The first element of each block (each block draws a PE)."""
        return range(0, self.total, self.per)


def clamp_tiling(lw: Lowering, n: LayerIR) -> ClampTiling | None:
    """The blocks of a ReLU / Clip with constant bounds on contiguous fp32 / fp16 data
    (None: not such a clamp): flat, one per PE down to `MIN_BLOCK_ELEMS`, at most one fp32
    bank."""
    b = clamp_bounds(lw, n)
    if b is None:
        return None
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or x.dtype not in ("fp32", "fp16") or y.dtype not in ("fp32", "fp16") \
            or not x.contiguous or not y.contiguous or x.shape != y.shape \
            or lw.g.tensors[n.inputs[0]].const:
        return None
    total = int(np.prod(x.shape)) if x.shape else 1
    per = max(1, min(total, lw.bank // 4, max(MIN_BLOCK_ELEMS, math.ceil(total / lw.n_pes))))
    return ClampTiling(b, x, y, total, per)


class CumsumTiling(NamedTuple):
    """The row blocks of a CUMSUM on its last axis (`Lowering.row_spans`)."""

    x: Placement
    y: Placement
    cols: int
    spans: list[tuple[int, int, int | None]]


def cumsum_tiling(lw: Lowering, n: LayerIR) -> CumsumTiling | None:
    """The row blocks of a CUMSUM along the last axis (None: another axis, or operands
    the tile cannot read)."""
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or not x.shape or not x.contiguous or not y.contiguous \
            or x.shape != y.shape or x.dtype != y.dtype or y.dtype not in ELEM_TYPES \
            or lw.g.tensors[n.inputs[0]].const:
        return None
    if int(node_attrs(n).axis) % len(x.shape) != len(x.shape) - 1:
        return None
    cols = x.shape[-1]
    rows = int(np.prod(x.shape[:-1])) if len(x.shape) > 1 else 1
    isz = ITEMSIZE[y.dtype]
    if cols * isz > lw.bank:
        return None
    return CumsumTiling(x, y, cols, lw.row_spans(y, rows, cols, lw.bank // (cols * isz)))


__all__ = ["ELEM_TYPES", "Block", "ClampTiling", "CumsumTiling", "EwTiling", "blocks",
           "clamp_tiling", "cumsum_tiling", "ew_tiling"]
