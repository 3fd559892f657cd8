"""The tiles of a ROPE layer, told without emitting them: its operands and row layout
(`rope_geometry`) and its blocks of positions per outer index (`rope_blocks`). The ROPE
lowering (`rope`) emits one VE_ROPE_TILE a block, each on a PE drawn in the cube holding
its rows; the plan pass counts the blocks.
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


class Rope(NamedTuple):
    """The operands of one ROPE layer and its tile geometry."""

    x: Placement
    y: Placement
    cos: Placement
    sin: Placement
    outer: list[int]      # axes iterated one index at a time
    length: int           # elements per row (heads · D)
    fields: dict[str, Any]


def _geometry(lw: Lowering, n: LayerIR) -> Rope | None:
    """The operands and row layout of a ROPE (None: strides the tile cannot read)."""
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
    return Rope(x, y, cos, sin, outer, heads * d, fields)


def rope_geometry(lw: Lowering, n: LayerIR) -> Rope | None:
    """The `Rope` of a tileable ROPE layer, or None when it runs whole."""
    return _geometry(lw, n) if rope_tileable(lw.g, n) else None


#: one ROPE block: (x offset, y offset of the outer index, the cos / sin table offsets,
#: first position, positions, the cube holding its rows or None)
RopeBlock = tuple[int, int, tuple[int, int], int, int, int | None]


def rope_blocks(lw: Lowering, geo: Rope) -> list[RopeBlock]:
    """Per outer index, blocks of positions inside one part of a spread output: one block
    per PE, but at least `MIN_TILE_BYTES` of x a block (a DMA's fixed cost), at most a
    bank."""
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
