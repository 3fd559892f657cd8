"""How a POOL or REDUCE layer is tiled, told from the graph and the memory plan
(`pool_tiling`, `reduce_tiling`; the plan pass asks whether a layer runs whole, `pool`
emits the tiles).

POOL: MaxPool / AveragePool of a non-constant fp32 / fp16 input into an output of its
dtype, both contiguous, whose window geometry `window.geom` takes; tiles are a block of
channels × a block of output rows (`pool_blocks`), each reading at least one input row.
REDUCE (mean, sum, max, min) over the trailing axes of a contiguous non-constant fp32 /
fp16 tensor into a contiguous fp32 / fp16 output of one value a row, a row within a TCM
bank. Reading a placement may place a constant; nothing else is allocated.
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


class PoolTiling(NamedTuple):
    """A tiled POOL: its placements, geometry, channels a tile, output rows a tile and
    the input rows of each block of output rows."""

    x: Placement
    y: Placement
    geo: Geom
    cb_max: int
    toh: int
    blocks: list[RowBlock]


class ReduceTiling(NamedTuple):
    """A tiled REDUCE: its placements, rows (leading elements) and reduced length."""

    x: Placement
    y: Placement
    rows: int
    length: int


def pool_blocks(lw: Lowering, geo: Geom, in_b: float, out_b: float) -> tuple[int, ...]:
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


def pool_tiling(lw: Lowering, n: LayerIR) -> PoolTiling | None:
    """POOL `n`'s tiling, or None when it runs whole (module doc)."""
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
    cb_max, toh = pool_blocks(lw, geo, isz, isz)
    blocks = [geo.rows_for(oh0, min(toh, geo.ho - oh0)) for oh0 in range(0, geo.ho, toh)]
    if any(rb.rows < 1 for rb in blocks):
        return None
    return PoolTiling(x, y, geo, cb_max, toh, blocks)


def reduce_tiling(lw: Lowering, n: LayerIR) -> ReduceTiling | None:
    """REDUCE `n`'s tiling, or None when it runs whole (module doc)."""
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
    return ReduceTiling(x, y, rows, length)


def pool_units(pt: PoolTiling) -> list[tuple[int, int, int, int, int, RowBlock]]:
    """(image, first channel, channels, first output row, rows, the input rows it reads)
    of each VE_POOL_TILE block of a tiled POOL (each draws a PE; the plan pass counts
    them)."""
    geo = pt.geo
    return [(img, c0, min(pt.cb_max, geo.c - c0), oh0, min(pt.toh, geo.ho - oh0), rb)
            for img in range(geo.n) for c0 in range(0, geo.c, pt.cb_max)
            for oh0, rb in zip(range(0, geo.ho, pt.toh), pt.blocks, strict=True)]


def reduce_blocks(lw: Lowering, rt: ReduceTiling) -> list[tuple[int, int]]:
    """(first row, rows) of each VE_REDUCE_TILE block of a tiled REDUCE: at most a bank,
    one per PE down to `MIN_BLOCK_ELEMS` (each draws a PE)."""
    rows, length = rt.rows, rt.length
    per = max(1, min(rows, lw.bank // (length * 4),
                     max(math.ceil(MIN_BLOCK_ELEMS / length), math.ceil(rows / lw.n_pes))))
    return [(r0, min(per, rows - r0)) for r0 in range(0, rows, per)]


__all__ = ["PoolTiling", "REDUCE_OPS", "ReduceTiling", "pool_blocks", "pool_tiling",
           "pool_units", "reduce_blocks", "reduce_tiling"]
