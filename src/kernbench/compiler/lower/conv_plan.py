"""Whether a CONV is tiled, and which ReLU / Clip its epilogue applies, told without tiling.

The plan pass decides which clamp a conv's epilogue computes (`planned_clamp`, the lowering
plan's `clamps`); the conv's tiles read that decision and the clamp gets no operation of
its own. The conv is tiled when its shape is (`conv_shape`: 1-D or 2-D, constant weight,
contiguous float output, channels dividing into the groups), the plan holds its weight at
the tiles' precision, and its activation can be read as the tiles need
(`float_activation`, or int8 data behind a DEQUANTIZE that `activation.prepare_x` reads).
`conv.lower_conv` asks the same functions, so the plan and the tiles agree. They read the
graph, the memory plan and the lowering plan only: nothing is placed or emitted.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import BFP_FORMATS, Placement
from kernbench.compiler.lower.activation import preparable, te_mode
from kernbench.compiler.lower.clamp import fusable_clamp
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.conv_tiles import ConvBlocking
from kernbench.compiler.lower.window import Geom, geom
from kernbench.compiler.quantize import int8_dequant_source
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: the dtype the tensor engine reads, by TE mode
TE_DTYPE = {"int": "int8", "fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}


class ConvShape(NamedTuple):
    """A tileable conv's TE mode, window geometry, groups, activation and output."""

    mode: str
    geo: Geom
    groups: int
    x: Placement
    y: Placement


def conv_shape(lw: Lowering, n: LayerIR) -> ConvShape | None:
    """The shape facts of CONV `n` its tiles need, or None when they cannot tile it (a
    constant activation or a non-constant weight, 3-D, a mode or output dtype the tiles do
    not compute, a non-contiguous activation or output, channels not dividing into the
    groups)."""
    g = lw.g
    if len(n.inputs) < 2 or not g.tensors[n.inputs[1]].const or g.tensors[n.inputs[0]].const:
        return None
    mode = te_mode(n)
    w_shape = list(g.tensors[n.inputs[1]].shape)
    xp = lw.placement(n.inputs[0])
    yp = lw.plan.placements.get(n.outputs[0])
    if mode not in TE_DTYPE or n.qbits_weight in BFP_FORMATS or yp is None \
            or not xp.contiguous or not yp.contiguous or yp.dtype not in ("fp32", "fp16"):
        return None
    geo = geom(n, list(xp.shape), list(yp.shape), w_shape[2:])
    groups = int(node_attrs(n).group)
    if geo is None or geo.c % groups or w_shape[0] % groups or w_shape[1] * groups != geo.c:
        return None
    return ConvShape(mode, geo, groups, xp, yp)


def dequantized_int8(lw: Lowering, x_tid: str, mode: str) -> bool:
    """Does an int-mode conv read `x_tid` as the int8 data behind its DEQUANTIZE (through
    `activation.prepare_x`)?"""
    return mode == "int" and int8_dequant_source(lw.g, x_tid) is not None


def float_activation(lw: Lowering, x_tid: str,
                     mode: str) -> tuple[Placement, str, float | None] | None:
    """(HBM placement, dtype the TE reads, static scale) of an activation the conv's tiles
    load as it lies and quantize (int) or cast in TCM right after the load; None when they
    cannot. A float-mode conv reads its format or fp32; an int-mode one fp32 with a
    symmetric static int8 scale (the quantize pass gives a conv input one)."""
    xp = lw.placement(x_tid)
    want = TE_DTYPE[mode]
    if mode != "int" and xp.dtype in (want, "fp32"):
        return xp, want, None
    if xp.dtype != "fp32":
        return None
    t = lw.g.tensors[x_tid]
    if t.quant is None or t.quant.dtype != "int8" or (
            t.quant.zero_point and np.any(np.asarray(lw.g.weights[t.quant.zero_point]) != 0)):
        return None
    return xp, want, float(np.asarray(lw.g.weights[t.quant.scale], np.float32).reshape(()))


def conv_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Will `conv.lower_conv` tile CONV `n` (module doc)?"""
    shape = conv_shape(lw, n)
    if shape is None or lw.lowering_plan.te_weight(
            (n.inputs[1], f"conv:{shape.mode}", n.qbits_weight)) is None:
        return False
    x_tid = n.inputs[0]
    if dequantized_int8(lw, x_tid, shape.mode):
        return preparable(lw, x_tid, "int", 8)
    return float_activation(lw, x_tid, shape.mode) is not None


def planned_clamp(lw: Lowering, n: LayerIR) -> str | None:
    """The ReLU / Clip layer the epilogue of CONV `n` computes, or None: `n` is tiled
    (`conv_tiled`) and the clamp is the only reader of its output (`clamp.fusable_clamp`).
    The plan pass asks."""
    if n.op_type != "CONV" or not conv_tiled(lw, n):
        return None
    found = fusable_clamp(lw, n.outputs[0])
    return found[0].id if found is not None else None


def conv_blocking(lw: Lowering, n: LayerIR, x_dtype: str, xt: str) -> ConvBlocking | None:
    """The block geometry of a tiled CONV whose activation lies in HBM as `x_dtype` and
    enters the TE as `xt` (None: it runs whole: no shape or weight the tiles take)."""
    shape = conv_shape(lw, n)
    if shape is None:
        return None
    wt = lw.lowering_plan.te_weight((n.inputs[1], f"conv:{shape.mode}", n.qbits_weight))
    if wt is None:
        return None
    cout = int(lw.g.tensors[n.inputs[1]].shape[0])
    return ConvBlocking(shape.geo, shape.groups, cout, x_dtype, xt, wt.dtype)
