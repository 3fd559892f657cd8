"""Row-wise vector ops on the last axis: LAYER_NORM, RMS_NORM, SOFTMAX, GELU, SILU, ADD, MUL.

The (rows × cols) input is cut into row blocks spread over PEs (at most one fp32 block per
TCM bank, at least one block per PE when there are enough rows, one per vector engine of
each PE when the work pays for it: `engines.EngineCursor.ve_blocks`; a PE's blocks take
its vector engines in turn). Per block: DMA the rows
in, DMA the per-column parameters (gamma, beta, a broadcast second operand) or the
matching rows of a full second operand, one VE_*_TILE, DMA the rows out (and, when
integer GEMMs read the output, the rows quantized for them: `xquant`). A layer whose
tensors are not contiguous fp32 / fp16 of one shape (or whose axis is not the last)
returns False and runs as a layer op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.xquant import quant_out, store_quantized
from kernbench.ir.model import LayerIR

ROW_OPS = {"LAYER_NORM": "VE_LAYERNORM_TILE", "RMS_NORM": "VE_RMSNORM_TILE",
           "SOFTMAX": "VE_SOFTMAX_TILE", "GELU": "VE_GELU_TILE", "SILU": "VE_SILU_TILE",
           "ADD": "VE_ADD_TILE", "MUL": "VE_MUL_TILE"}

#: the vector engine's cost-table op of each layer (pe_math.op_cycles)
COST_OP = {"LAYER_NORM": "layernorm", "RMS_NORM": "rmsnorm", "SOFTMAX": "softmax",
           "GELU": "gelu", "SILU": "silu", "ADD": "add", "MUL": "mul"}

#: a second operand of the tile: (role, placement, one row per input row? else one row)
Extra = tuple[str, Placement, bool]


def rows_cols(p: Placement) -> tuple[int, int]:
    """(rows, cols) of a tensor seen as a matrix over its last axis."""
    cols = p.shape[-1] if p.shape else 1
    return int(np.prod(p.shape[:-1])) if len(p.shape) > 1 else 1, cols


def _last_axis(n: LayerIR, x: Placement) -> bool:
    return n.attributes.get("axis", -1) % len(x.shape) == len(x.shape) - 1


def _norm_params(lw: Lowering, n: LayerIR, cols: int, fields: dict[str, Any],
                 extra: list[Extra]) -> bool:
    fields["eps"] = float(n.attributes["eps"])
    names = ("gamma", "beta") if n.op_type == "LAYER_NORM" else ("gamma",)
    for role, tid in zip(names, n.inputs[1:], strict=False):
        if not tid:
            continue
        if not lw.g.tensors[tid].const or lw.g.tensors[tid].shape != [cols]:
            return False
        extra.append((role, lw.raw_const(tid), False))
    if extra:
        fields["param_qbits"] = 32
    return True


def _binary_operand(lw: Lowering, n: LayerIR, x: Placement, cols: int,
                    fields: dict[str, Any], extra: list[Extra]) -> bool:
    b = lw.placement(n.inputs[1])
    if b.dtype not in ("fp32", "fp16") or not b.contiguous:
        return False
    fields["in2_qbits"] = QBITS_OF[b.dtype]
    if tuple(b.shape) == tuple(x.shape):
        extra.append(("in2", b, True))
    elif int(np.prod(b.shape)) == cols and (not b.shape or b.shape[-1] == cols):
        extra.append(("in2", b, False))
        fields["in2_rows"] = 1
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
        fields["approximate"] = n.attributes.get("approximate", "none")
    elif n.op_type in ("ADD", "MUL"):
        ok = _binary_operand(lw, n, x, cols, fields, extra)
    return (fields, extra) if ok else None


def lower_row_op(lw: Lowering, n: LayerIR) -> bool:
    opcode = ROW_OPS[n.op_type]
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or x.dtype not in ("fp32", "fp16") or y.dtype not in ("fp32", "fp16") \
            or not x.contiguous or not y.contiguous or x.shape != y.shape \
            or lw.g.tensors[n.inputs[0]].const:
        return False
    rows, cols = rows_cols(x)
    xs, ys = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype]
    spec = _op_fields(lw, n, x, y, cols)
    if spec is None:
        return False
    fields, extra = spec
    q = quant_out(lw, n.outputs[0]) if y.dtype == "fp32" else None
    # one block per vector engine of every PE when there are enough rows and work
    split = lw.engines.ve_blocks(rows, cols, lw.n_pes, COST_OP[n.op_type])
    for r0, r, pe in lw.row_blocks(y, rows, cols, lw.bank // (cols * 4), split):
        bi = lw.buf(pe, r * cols * xs, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        reads = [("in", bi)]
        frees = [bi]
        for role, p, per_row in extra:
            cnt = r * cols if per_row else cols
            be = lw.buf(pe, cnt * ITEMSIZE[p.dtype], f"{n.id}.{role}")
            lw.dma(False, pe, be, p, r0 * cols if per_row else 0, 1, cnt, cnt, n.id,
                   role="activation" if per_row else "weight")
            reads.append((role, be))
            frees.append(be)
        bo = lw.buf(pe, r * cols * ys, f"{n.id}.out")
        ve = lw.engines.ve(pe)
        lw.op(opcode, pe, n.id, dict(fields, rows=r, **ve), reads=reads,
              writes=[("out", bo)],
              frees=frees)
        if q is not None:  # the consuming GEMMs' int8 activation, first (their chain)
            store_quantized(lw, q, pe, bo, n.id, r0 * cols, 1, r * cols, r * cols, ve)
        lw.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
    return True
