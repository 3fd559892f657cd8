"""Row-block helpers the tile lowerings share: a tensor seen as rows × cols, the least
bytes a tile moves, and where a layer of one block runs. Below every per-op lowering, so
that none of them imports another for these."""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering

#: a copy tile moves at least this many bytes when the tensor has them (a DMA's fixed cost)
MIN_TILE_BYTES = 4096


def rows_cols(p: Placement) -> tuple[int, int]:
    """(rows, cols) of a tensor seen as a matrix over its last axis."""
    cols = p.shape[-1] if p.shape else 1
    return int(np.prod(p.shape[:-1])) if len(p.shape) > 1 else 1, cols


def one_tile_spread(lw: Lowering,
                    bl: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Row blocks as given, but a single block goes to `Lowering.lone_pe`."""
    return [(bl[0][0], bl[0][1], lw.lone_pe(bl[0][2]))] if len(bl) == 1 else bl
