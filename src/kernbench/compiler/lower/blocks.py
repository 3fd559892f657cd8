"""Block helpers the tile lowerings share: a tensor seen as rows × cols, the least
bytes a tile moves, where a layer of one block runs, the output tiles of a batched matmul
and where one batch index starts in an operand. Below every per-op lowering, so
that none of them imports another for these."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering

#: a copy tile moves at least this many bytes when the tensor has them (a DMA's fixed cost)
MIN_TILE_BYTES = 4096


def rows_cols(p: Placement) -> tuple[int, int]:
    """(rows, cols) of a tensor seen as a matrix over its last axis."""
    cols = p.shape[-1] if p.shape else 1
    return int(np.prod(p.shape[:-1])) if len(p.shape) > 1 else 1, cols


def one_tile_spread(lw: Lowering, layer: str,
                    bl: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Row blocks of `layer` as given, but a single block goes to the PE the lowering plan
    gives a layer of one tile (`Lowering.lone_pe`)."""
    return [(bl[0][0], bl[0][1], lw.lone_pe(layer, bl[0][2]))] if len(bl) == 1 else bl


def batch_offset(p: Placement, idx: tuple[int, ...]) -> int:
    """Element offset of batch index `idx` (of the output's batch dims) into operand p,
    broadcasting p's leading dims as ONNX MatMul does."""
    lead = p.shape[:-2]
    strides = p.strides[:-2]
    off = 0
    for d, s, i in zip(lead[::-1], strides[::-1], idx[::-1], strict=False):
        off += (i % d) * s
    return off


def out_tiles(shape: Sequence[int], tm: int, tn: int
              ) -> Iterator[tuple[tuple[int, ...], int, int, int, int]]:
    """(batch index, first row, first column, rows, columns) of every output tile of a
    batched matmul output `shape` cut into tm × tn tiles, in program order."""
    m, nn = shape[-2:]
    for idx in itertools.product(*(range(d) for d in shape[:-2])):
        for m0 in range(0, m, tm):
            for n0 in range(0, nn, tn):
                yield tuple(idx), m0, n0, min(tm, m - m0), min(tn, nn - n0)


def out_tile_count(shape: Sequence[int], tm: int, tn: int) -> int:
    """How many tiles `out_tiles` cuts a batched matmul output `shape` into (each draws
    a PE)."""
    m, nn = shape[-2:]
    return math.prod(shape[:-2]) * math.ceil(m / tm) * math.ceil(nn / tn)
