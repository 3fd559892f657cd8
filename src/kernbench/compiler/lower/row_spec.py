"""How a row-wise layer (LAYER_NORM, RMS_NORM, SOFTMAX, GELU, SILU, ADD, MUL on the last
axis) tiles: its vector opcode, input and output placements, the tile's CMDQ fields and its
second operands (gamma / beta, a broadcast or full second operand) — `row_spec`. Shared by
the row-wise lowering (`rowwise`) and the GEMM that row-reduces a norm in its epilogue
(`gemm_rowreduce`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kernbench.cmdq.opcodes.registry import opcode_of
from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import (
    FLOAT_DTYPES,
    QBITS_OF,
    Lowering,
    float_format,
    mixed_halves,
)
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import OPS, node_attrs

#: the layers tiled here, by their vector opcode (`IrOp.row_wise`, `IrOp.vector_opcode`)
ROW_OPS = {op: opcode_of(c.vector_opcode) for op, c in OPS.items() if c.row_wise}


#: a second operand of the tile: (role, placement, rows it repeats with: 0 for one
#: broadcast row, the input's rows for one row per input row, or a period P < rows when
#: row i of the input reads row i mod P: an operand broadcast over leading axes)
Extra = tuple[str, Placement, int]


def _last_axis(n: LayerIR, x: Placement) -> bool:
    return node_attrs(n).axis % len(x.shape) == len(x.shape) - 1


def _norm_params(lw: Lowering, n: LayerIR, cols: int, fields: dict[str, Any],
                 extra: list[Extra]) -> bool:
    fields["eps"] = float(node_attrs(n).eps)
    names = ("gamma", "beta") if n.op_type == "LAYER_NORM" else ("gamma",)
    for role, tid in zip(names, n.inputs[1:], strict=False):
        if not tid:
            continue
        if not lw.g.tensors[tid].const or lw.g.tensors[tid].shape != [cols]:
            return False
        extra.append((role, lw.real_const(tid), 0))
    # gamma and beta are read at their stored width (fp16 in an fp16 export); the tile has
    # one param_qbits, so parameters of two different float types are not tiled
    dtypes = {p.dtype for _, p, _ in extra}
    if len(dtypes) > 1 or not dtypes <= set(QBITS_OF):
        return False
    if extra:
        fields["param_qbits"] = QBITS_OF[dtypes.pop()]
    return True


def _binary_operand(lw: Lowering, n: LayerIR, x: Placement, cols: int,
                    fields: dict[str, Any], extra: list[Extra]) -> bool:
    """The second operand: same shape, one row of `cols` values, a constant scalar (made
    a row of `cols` copies: the same fp32 product / sum), or broadcast over leading axes
    (its trailing shape equals the input's, leading axes 1: e.g. an attention mask
    [1, 1, S, T] added to scores [B, H, S, T])."""
    rows = rows_cols(x)[0]
    tid = n.inputs[1]
    t = lw.g.tensors[tid]
    if t.const and int(np.prod(t.shape)) == 1 and cols > 1 and t.dtype == "fp32":
        v = np.asarray(lw.g.weights[tid], np.float32).reshape(())
        row = np.full((cols,), v, np.float32)
        extra.append(("in2", lw.const(f"{tid}@row{cols}", row, "fp32", source=tid), 0))
        fields["in2_qbits"], fields["in2_rows"] = 32, 1
        return True
    b = lw.value_placement(tid)
    if b.dtype not in FLOAT_DTYPES or not b.contiguous:
        return False
    fields["in2_qbits"] = QBITS_OF[b.dtype]
    bshape, xshape = tuple(b.shape), tuple(x.shape)
    lead = len(xshape) - len(bshape)
    if bshape == xshape:
        extra.append(("in2", b, rows))
    elif int(np.prod(b.shape)) == cols and (not b.shape or b.shape[-1] == cols):
        extra.append(("in2", b, 0))
        fields["in2_rows"] = 1
    elif lead >= 0 and len(bshape) >= 2 and all(d == 1 for d in bshape[:-2]) \
            and bshape[-2:] == xshape[-2:] and bshape[-2] < rows:
        extra.append(("in2", b, bshape[-2]))
    else:
        return False
    return True


def _op_fields(lw: Lowering, n: LayerIR, x: Placement, y: Placement,
               cols: int) -> tuple[dict[str, Any], list[Extra]] | None:
    """The tile's CMDQ fields and second operands, or None if the layer cannot be tiled."""
    fields: dict[str, Any] = {"length": cols, "qbits_activation": QBITS_OF[x.dtype],
                              "out_qbits": QBITS_OF[y.dtype]}
    extra: list[Extra] = []
    ok = True
    if n.op_type in ("LAYER_NORM", "RMS_NORM"):
        ok = _last_axis(n, x) and _norm_params(lw, n, cols, fields, extra)
    elif n.op_type == "SOFTMAX":
        ok = _last_axis(n, x)
    elif n.op_type == "GELU":
        fields["approximate"] = node_attrs(n).approximate
    elif n.op_type in ("ADD", "MUL"):
        ok = _binary_operand(lw, n, x, cols, fields, extra)
    dts = [x.dtype, y.dtype] + [p.dtype for _, p, _ in extra]
    if mixed_halves(*dts):  # one tile names one 16-bit float format
        return None
    fields.update(float_format(*dts))
    return (fields, extra) if ok else None


class RowSpec(NamedTuple):
    """How a row-wise layer tiles: its opcode, input and output placements, the tile's
    CMDQ fields (without rows and engine) and its second operands."""

    opcode: str
    x: Placement
    y: Placement
    fields: dict[str, Any]
    extra: list[Extra]


def row_spec(lw: Lowering, n: LayerIR) -> RowSpec | None:
    """The layer's `RowSpec`, or None when its tensors are not contiguous float of one
    shape (or its operands cannot be tiled)."""
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or x.dtype not in FLOAT_DTYPES or y.dtype not in FLOAT_DTYPES \
            or not x.contiguous or not y.contiguous or x.shape != y.shape \
            or lw.g.tensors[n.inputs[0]].const:
        return None
    spec = _op_fields(lw, n, x, y, rows_cols(x)[1])
    return None if spec is None else RowSpec(ROW_OPS[n.op_type], x, y, *spec)


def row_op_spans(lw: Lowering, n: LayerIR,
                 spec: RowSpec) -> list[tuple[int, int, int | None]]:
    """The row blocks (`Lowering.row_spans`) of row-wise layer `n` tiled as `spec`: at most
    one fp32 block per TCM bank, one per PE, or one per vector engine of every PE when
    there are enough rows and work (`engines.EngineCursor.ve_blocks`). The row-wise
    lowering cuts its blocks with it and the plan pass counts them (each draws a PE)."""
    rows, cols = rows_cols(spec.x)
    split = lw.engines.ve_blocks(rows, cols, lw.n_pes, OPS[n.op_type].layer_cost)
    return lw.row_spans(spec.y, rows, cols, lw.bank // (cols * 4), split)
