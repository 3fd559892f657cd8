"""The blocks of a POOL or a REDUCE over trailing axes, told without emitting them
(`pool_tiling`, `reduce_tiling`): the lowerings (`pool`) emit one tile a block, each on
the next PE; the plan pass counts the blocks.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.window import MIN_BLOCK_ELEMS, Geom, RowBlock, choose, geom, halves
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: cycles charged per tile when comparing block sizes (DMA and command round trips)
TILE_OVERHEAD_CYCLES = 600
REDUCE_OPS = ("mean", "sum", "max", "min")


def _pool_blocks(lw: Lowering, geo: Geom, in_b: float, out_b: float) -> tuple[int, ...]:
    """(channels, output rows) of a pool tile."""
    lanes = lw.state.topology.config.cube.pe_template.pe_math.lanes

    def fits(cb: int, t: int) -> bool:
        rows = min(geo.h, (t - 1) * geo.strides[0] + (geo.kh - 1) * geo.dils[0] + 1)
        return max(cb * rows * geo.w * in_b, cb * t * geo.wo * out_b) <= lw.bank

    def cost(cb: int, t: int) -> float:
        return math.ceil(cb * t * geo.wo * geo.kh * geo.kw / lanes) + TILE_OVERHEAD_CYCLES

    def tiles(cb: int, t: int) -> int:
        return geo.n * math.ceil(geo.c / cb) * math.ceil(geo.ho / t)

    cands = [(cb, t) for cb in halves(geo.c) for t in halves(geo.ho)]
    return choose(cands, fits, cost, tiles, lw.n_pes)


class PoolTiling(NamedTuple):
    """A tiled POOL: input, output, geometry and its blocks (image, first channel,
    channels, first output row, rows, the input rows it reads)."""

    x: Placement
    y: Placement
    geo: Geom
    units: list[tuple[int, int, int, int, int, RowBlock]]


def pool_tiling(lw: Lowering, n: LayerIR) -> PoolTiling | None:
    """The blocks of a MaxPool / AveragePool on contiguous fp32 / fp16 data (None: it
    runs whole): channels × output rows, sized by `_pool_blocks`."""
    a = node_attrs(n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if y is None or a.mode not in ("max", "avg") or x.dtype not in ("fp32", "fp16") \
            or y.dtype != x.dtype or not x.contiguous or not y.contiguous \
            or lw.g.tensors[n.inputs[0]].const:
        return None
    geo = geom(n, list(x.shape), list(y.shape), list(a.kernel_shape))
    if geo is None:
        return None
    isz = ITEMSIZE[x.dtype]
    cb_max, toh = _pool_blocks(lw, geo, isz, isz)
    blocks = [geo.rows_for(oh0, min(toh, geo.ho - oh0)) for oh0 in range(0, geo.ho, toh)]
    if any(rb.rows < 1 for rb in blocks):
        return None
    units = [(img, c0, min(cb_max, geo.c - c0), oh0, min(toh, geo.ho - oh0), rb)
             for img in range(geo.n) for c0 in range(0, geo.c, cb_max)
             for oh0, rb in zip(range(0, geo.ho, toh), blocks, strict=True)]
    return PoolTiling(x, y, geo, units)


class ReduceTiling(NamedTuple):
    """A tiled REDUCE: input, output, reduced elements a row, row blocks (first, rows)."""

    x: Placement
    y: Placement
    length: int
    blocks: list[tuple[int, int]]


def reduce_tiling(lw: Lowering, n: LayerIR) -> ReduceTiling | None:
    """The row blocks of a REDUCE over the trailing axes of a contiguous fp32 / fp16
    tensor (None: it runs whole): rows = the leading elements, at most a bank each, one
    per PE down to `MIN_BLOCK_ELEMS`."""
    a = node_attrs(n)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    rank = len(x.shape)
    axes = sorted(int(v) % rank for v in (a.axes or range(rank))) if rank else []
    if y is None or a.op not in REDUCE_OPS or not axes \
            or axes != list(range(rank - len(axes), rank)) or x.dtype not in ("fp32", "fp16") \
            or y.dtype not in ("fp32", "fp16") or not x.contiguous or not y.contiguous \
            or lw.g.tensors[n.inputs[0]].const:
        return None
    rows = int(np.prod(x.shape[:axes[0]])) if axes[0] else 1
    length = int(np.prod(x.shape[axes[0]:]))
    if int(np.prod(y.shape)) != rows or length * 4 > lw.bank:
        return None
    per = max(1, min(rows, lw.bank // (length * 4),
                     max(math.ceil(MIN_BLOCK_ELEMS / length), math.ceil(rows / lw.n_pes))))
    return ReduceTiling(x, y, length, [(r0, min(per, rows - r0)) for r0 in range(0, rows, per)])
