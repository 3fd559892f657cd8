"""How a ROPE layer is tiled, told from the graph and the memory plan (`rope_tiling`; the
plan pass asks whether a layer runs whole, `rope` emits the tiles).

Tiled: a rotate-half ROPE with half-equal tables (`layout.rope_tileable`: constant, or
computed at run time so, `rope_tables`) whose x, y and tables have a unit innermost stride; a row holds every head of one position when the
heads axis is contiguous with D on both sides and the tables do not vary along it.
Reading a placement may place a constant; nothing else is allocated.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.layout import rope_tileable
from kernbench.compiler.lower.blocks import MIN_TILE_BYTES
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
    roles: tuple[str, str]  # the DMA role of the cos / sin loads (weight: constant)


def rope_tiling(lw: Lowering, n: LayerIR) -> RopeTiling | None:
    """ROPE `n`'s operands and tile geometry, or None when it runs whole (module doc)."""
    if not rope_tileable(lw.g, n):
        return None
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    cos, sin = (lw.raw_const(t) if lw.g.tensors[t].const else lw.placement(t)
                for t in n.inputs[1:3])
    if y is None or any(p.strides[-1] != 1 for p in (x, y, cos, sin)):
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
    roles = tuple("weight" if lw.g.tensors[t].const else "activation" for t in n.inputs[1:3])
    return RopeTiling(x, y, cos, sin, outer, heads * d, fields, roles)


def _table_offset(t: Placement, idx: dict[int, int], rank: int) -> int:
    """Element offset of table row 0 for the outer index `idx` (x axis → index); the
    table broadcasts over its size-1 axes and over the axes it lacks."""
    lead = rank - len(t.shape)
    return sum(i * t.strides[a - lead] for a, i in idx.items()
               if a >= lead and t.shape[a - lead] > 1)


def _segments(lw: Lowering, y: Placement, yo: int, seq: int) -> list[tuple[int, int, int | None]]:
    """(first position, end, cube) runs of y's positions that lie in one part of a spread
    storage (one run in its home cube otherwise): blocks never cross a part."""
    if not y.parts:
        return [(0, seq, lw.home_cube(y))]
    isz = ITEMSIZE[y.dtype]
    out: list[tuple[int, int, int | None]] = []
    last = -1
    for s in range(seq):
        i = y.part_of(y.addr + int((yo + s * y.strides[-2]) * isz))
        if i != last:
            out.append((s, s + 1, lw.cube_of_addr(y.parts[i][2])))
            last = i
        else:
            out[-1] = (out[-1][0], s + 1, out[-1][2])
    return out


#: one ROPE block: (x offset, y offset of the outer index, the cos / sin table offsets,
#: first position, positions, the cube holding its rows or None)
RopeBlock = tuple[int, int, tuple[int, int], int, int, int | None]


def rope_blocks(lw: Lowering, geo: RopeTiling) -> list[RopeBlock]:
    """Per outer index, blocks of positions inside one part of a spread output: one block
    per PE, but at least `MIN_TILE_BYTES` of x a block (a DMA's fixed cost), at most a
    bank. The ROPE lowering emits one tile a block, on a PE of its cube; the plan pass
    counts them."""
    x, y, rank, length = geo.x, geo.y, len(geo.x.shape), geo.length
    seq = x.shape[-2]
    fit = max(1, lw.bank // (length * 4))
    n_outer = int(np.prod([x.shape[a] for a in geo.outer])) if geo.outer else 1
    least = math.ceil(MIN_TILE_BYTES / (length * ITEMSIZE[x.dtype]))
    out: list[RopeBlock] = []
    for idx in np.ndindex(*[x.shape[a] for a in geo.outer]):
        at = dict(zip(geo.outer, idx, strict=True))
        xo = sum(i * x.strides[a] for a, i in at.items())
        yo = sum(i * y.strides[a] for a, i in at.items())
        offs = (_table_offset(geo.cos, at, rank), _table_offset(geo.sin, at, rank))
        for lo, hi, cube in _segments(lw, y, yo, seq):
            want = math.ceil((hi - lo) * n_outer / lw.pes_of(cube))
            per = max(1, min(hi - lo, fit, max(least, want)))
            out += [(xo, yo, offs, s0, min(per, hi - s0), cube) for s0 in range(lo, hi, per)]
    return out


__all__ = ["RopeBlock", "RopeTiling", "rope_blocks", "rope_tiling"]
