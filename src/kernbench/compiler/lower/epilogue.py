"""Element-wise consumers fused into a GEMM's epilogue.

A GEMM whose output has exactly one consumer (through reshapes that alias it), a GELU /
SILU or an ADD of a residual (same shape, or N values broadcast over the rows), and is not
a graph output:
the consumer's VE tile runs on the accumulator tile in TCM right after the epilogue's
VE_DEQUANTIZE_TILE (in place, same vector engine), and the tile is stored into the
consumer's output. The GEMM's own output is never written to HBM (its allocation and view
are dropped from the memory plan) and the consumer layer gets no lowering of its own.

The fused ops carry the consumer's layer id, so the consumer still shows in stats.json
`layers` (its span is that of its tiles, inside the GEMM's) and its roofline bound still
counts; `TileOp.fused_into` names the GEMM, so the schedule treats them as part of the
GEMM's layer. Numerics are the unfused ones: the same VE op on the same values (the
dequantized tile at the GEMM output's dtype), elementwise, so the data pass stays exact.

A residual must be produced before the GEMM in node order (the fused ADD reads it while
the GEMM runs; every store of it comes earlier in the program).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.cmdq.opcodes.registry import opcode_of
from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import (
    FLOAT_DTYPES,
    QBITS_OF,
    Lowering,
    float_format,
    mixed_halves,
)
from kernbench.compiler.lower.gemm_outputs import tiled_outputs
from kernbench.compiler.lower.placement import sole_consumer
from kernbench.compiler.lower.values import FusedStep
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import OPS, node_attrs, ops_where

#: consumer op types the epilogue can apply (`IrOp.epilogue`)
FUSABLE = ops_where(lambda c: c.epilogue)
_FLOAT = FLOAT_DTYPES


def _residual(lw: Lowering, gemm: LayerIR, add: LayerIR, x_tid: str,
              nn: int) -> tuple[Placement, bool] | None:
    """(placement, one row per output row?) of the ADD's other operand, if it is readable
    while the GEMM runs: contiguous float, same shape or N values, written before it."""
    others = [t for t in add.inputs if t != x_tid]
    if len(add.inputs) != 2 or len(others) != 1:
        return None
    tid = others[0]
    t = lw.g.tensors[tid]
    if not t.const and t.producer is not None:
        order = {x.id: i for i, x in enumerate(lw.g.nodes)}
        if order.get(t.producer, len(order)) >= order[gemm.id]:
            return None
    b = lw.placement(tid)
    if b.dtype not in _FLOAT or not b.contiguous:
        return None
    x_shape = list(lw.g.tensors[x_tid].shape)
    if list(t.shape) == x_shape:
        return b, True
    if int(np.prod(b.shape)) == nn and b.shape and b.shape[-1] == nn and x_shape[-1] == nn:
        return b, False
    return None


def fusable_step(lw: Lowering, gemm: LayerIR, out_tid: str, op: Placement,
                 nn: int) -> FusedStep | None:
    """The consumer of `out_tid` the GEMM's epilogue can apply, or None. The plan pass
    asks (`gemm.planned_epilogue`); the tiles read its answer from the lowering plan."""
    g = lw.g
    found = sole_consumer(g, lw.plan, out_tid)
    if found is None or op.dtype not in _FLOAT:
        return None
    c, chain = found
    x_tid = chain[-1]
    if c.op_type not in FUSABLE or lw.state.folded.get(c.id) or len(c.outputs) != 1:
        return None
    y = lw.plan.placements.get(c.outputs[0])
    if y is None or y.dtype not in _FLOAT or not y.contiguous \
            or list(g.tensors[c.outputs[0]].shape) != list(g.tensors[x_tid].shape) \
            or int(np.prod(y.shape)) != int(np.prod(op.shape)):
        return None
    fields: dict[str, Any] = {"qbits_activation": QBITS_OF[op.dtype],
                              "out_qbits": QBITS_OF[y.dtype], **float_format(op.dtype, y.dtype)}
    if mixed_halves(op.dtype, y.dtype):
        return None
    if c.op_type in ("GELU", "SILU"):
        if c.inputs[0] != x_tid:
            return None
        if c.op_type == "GELU":
            fields["approximate"] = node_attrs(c).approximate
        return FusedStep(c, fields, y, chain=chain)
    res = _residual(lw, gemm, c, x_tid, nn)
    if res is None:
        return None
    b, per_row = res
    if mixed_halves(op.dtype, y.dtype, b.dtype):
        return None
    fields.update(in2_qbits=QBITS_OF[b.dtype], **float_format(b.dtype))
    if not per_row:
        fields["in2_rows"] = 1
    return FusedStep(c, fields, y, [t for t in c.inputs if t != x_tid][0], per_row, chain)


def planned_epilogue(lw: Lowering, n: LayerIR) -> FusedStep | None:
    """The consumer the epilogue of GEMM `n` (or of a MATMUL_INTEGER the plan tiles)
    applies, or None: `n` will be tiled (`gemm_outputs.tiled_outputs`) and `fusable_step`
    accepts its output's consumer. The plan pass asks; it places and emits nothing."""
    if n.op_type not in ("GEMM", "MATMUL_INTEGER"):
        return None
    _, outs = tiled_outputs(lw, n)
    if not outs:
        return None
    out = outs[0]
    return fusable_step(lw, n, out.tid, out.placement, out.nn)


def residual_of(lw: Lowering, step: FusedStep | None) -> Placement | None:
    """Where the residual of a fused ADD lives (a constant placed on first use), read once
    by the GEMM before its tiles; None without a residual."""
    return lw.placement(step.in2_tid) if step is not None and step.in2_tid else None


def apply_step(lw: Lowering, step: FusedStep, pe: int, c: Buf, tile: tuple[int, int, int, int],
               nn: int, gemm_id: str, engine: dict[str, Any],
               residual: Placement | None) -> None:
    """The consumer's VE tile on accumulator `c` (in place) on the same vector engine;
    a residual tile (`residual`: where `step`'s residual lives) is loaded first."""
    m0, n0, tm, tn = tile
    layer = step.layer.id
    reads = [("in", c)]
    frees = []
    if residual is not None:
        b = residual
        if step.in2_per_row:
            be = lw.buf(pe, tm * tn * ITEMSIZE[b.dtype], f"{layer}.in2")
            ld = lw.dma(False, pe, be, b, m0 * nn + n0, tm, tn, nn, layer)
        else:
            be = lw.buf(pe, tn * ITEMSIZE[b.dtype], f"{layer}.in2")
            ld = lw.dma(False, pe, be, b, n0, 1, tn, tn, layer, role="weight")
        ld.fused_into = gemm_id
        reads.append(("in2", be))
        frees.append(be)
    o = lw.op(opcode_of(OPS[step.layer.op_type].vector_opcode), pe, layer,
              dict(step.fields, length=tn, rows=tm, **engine),
              reads=reads, writes=[("out", c)], frees=frees)
    o.fused_into = gemm_id


def drop_fused(lw: Lowering, gemm: LayerIR, out_tid: str, step: FusedStep) -> None:
    """After the GEMM's tiles: its output (and the views of it on the way to the consumer)
    is never written, so it gets no storage and no view in memory.json (`--dump-
    intermediates` does not compare it), and those views are lowered no further
    (`Lowering.forget`; the consumer and the views are the lowering plan's `fused`)."""
    lw.forget(step.chain)
