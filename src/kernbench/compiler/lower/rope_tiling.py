"""How a ROPE layer is tiled, told from the graph and the memory plan (`rope_tiling`; the
plan pass asks whether a layer runs whole, `rope` emits the tiles).

Tiled: a rotate-half ROPE with constant half-equal tables (`layout.rope_tileable`) whose
x and y have a unit innermost stride; a row holds every head of one position when the
heads axis is contiguous with D on both sides and the tables do not vary along it.
Reading a placement may place a constant; nothing else is allocated.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kernbench.compiler.hbm import Placement
from kernbench.compiler.layout import rope_tileable
from kernbench.compiler.lower.context import QBITS_OF, Lowering, float_format
from kernbench.ir.model import LayerIR


class RopeTiling(NamedTuple):
    """The operands of one ROPE layer and its tile geometry."""

    x: Placement
    y: Placement
    cos: Placement
    sin: Placement
    outer: list[int]      # axes iterated one index at a time
    length: int           # elements per row (heads · D)
    fields: dict[str, Any]


def rope_tiling(lw: Lowering, n: LayerIR) -> RopeTiling | None:
    """ROPE `n`'s operands and tile geometry, or None when it runs whole (module doc)."""
    if not rope_tileable(lw.g, n):
        return None
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    cos, sin = lw.raw_const(n.inputs[1]), lw.raw_const(n.inputs[2])
    if y is None or x.strides[-1] != 1 or y.strides[-1] != 1:
        return None
    rank, d = len(x.shape), x.shape[-1]
    # a heads axis contiguous with D on both sides and not in the tables: heads in a row
    ha = rank - 3
    heads = 1
    if ha >= 0 and x.strides[ha] == d and y.strides[ha] == d and all(
            len(t.shape) < 3 or t.shape[ha - (rank - len(t.shape))] == 1 for t in (cos, sin)):
        heads = x.shape[ha]
    outer = [a for a in range(rank - 2) if not (heads > 1 and a == ha)]
    fields = {"length": heads * d, "head_dim": d, "style": "half",
              "qbits_activation": QBITS_OF[x.dtype], "out_qbits": QBITS_OF[y.dtype],
              "param_qbits": QBITS_OF[cos.dtype],
              **float_format(x.dtype, y.dtype, cos.dtype, sin.dtype)}
    return RopeTiling(x, y, cos, sin, outer, heads * d, fields)


__all__ = ["RopeTiling", "rope_tiling"]
