"""ReLU and Clip (ELEMENTWISE relu / clip with constant scalar bounds): their bounds, the
VE_CLIP_TILE fields, and whether a producer's epilogue computes them.

A clamp whose input is a tiled convolution's output, read by nothing else, is computed in
that convolution's epilogue (`fusable_clamp`; the TCM tile is clamped before its store):
the plan pass decides it (`conv_plan.planned_clamp`, the lowering plan's `clamps`) and the
clamp takes no operation of its own. Any other clamp is tiled by the ELEMENTWISE lowering
(`elementwise.lower_clamp`).
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: the ELEMENTWISE kinds that are clamps
CLAMP_OPS = ("relu", "clip")

#: (lower bound or None, upper bound or None)
Bounds = tuple[float | None, float | None]


def clamp_bounds(lw: Lowering, n: LayerIR) -> Bounds | None:
    """The bounds of a ReLU / Clip layer (None: not a clamp with constant scalar bounds)."""
    if n.op_type != "ELEMENTWISE" or node_attrs(n).op not in CLAMP_OPS:
        return None
    if node_attrs(n).op == "relu":
        return (0.0, None)
    if len(n.inputs) != 3:
        return None
    out: list[float | None] = []
    for tid in n.inputs[1:]:
        t = lw.g.tensors.get(tid) if tid else None
        if t is None or not t.const or np.asarray(lw.g.weights[tid]).size != 1:
            return None
        v = float(np.asarray(lw.g.weights[tid]).reshape(()))
        out.append(None if math.isinf(v) else v)
    return (out[0], out[1])


def fusable_clamp(lw: Lowering, out_tid: str) -> tuple[LayerIR, Bounds] | None:
    """The clamp layer a producer's epilogue may compute: the only reader of `out_tid`
    (not a graph output), float data of the same shape in contiguous HBM."""
    g = lw.g
    t = g.tensors[out_tid]
    if out_tid in g.outputs or len(t.consumers) != 1:
        return None
    c = g.node(t.consumers[0])
    b = clamp_bounds(lw, c)
    if b is None or c.inputs[0] != out_tid:
        return None
    y = lw.plan.placements.get(c.outputs[0])
    x = lw.plan.placements.get(out_tid)
    if y is None or x is None or not y.contiguous or y.shape != x.shape \
            or y.dtype not in ("fp32", "fp16"):
        return None
    return c, b


def clip_fields(b: Bounds, rows: int, length: int, qbits: int) -> dict[str, object]:
    """The fields of a VE_CLIP_TILE in place on a float tile."""
    return {"length": length, "rows": rows, "qbits_activation": qbits, "out_qbits": qbits,
            "lo": b[0], "hi": b[1]}
