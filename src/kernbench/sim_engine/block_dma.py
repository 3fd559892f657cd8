"""The data pass of a block-float DMA load (memory op ``dma_unpack``, DMA_LOAD_TILE with
``block_float``): each HBM row holds whole blocks of a block float
(`numerics.block_float`: an exponent byte and its codes per 16 elements); the TCM gets
the decoded values as bf16, rows packed back to back. Block-float values have at most 8
significant bits, so bf16 holds them exactly."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from kernbench.numerics import block_float
from kernbench.sim_engine.memory_store import MemoryStore

Range = tuple[str, int, int]


def _rows(p: dict[str, Any]) -> tuple[int, int, int]:
    """(rows, HBM bytes a row, HBM stride)."""
    rows = int(p.get("rows", 1) or 1)
    rb = int(p.get("row_bytes", p["nbytes"]))
    return rows, rb, int(p.get("src_stride", rb))


def unpack_ranges(p: dict[str, Any]) -> tuple[list[Range], list[Range]]:
    """(reads, writes) byte ranges of a ``dma_unpack`` record."""
    rows, rb, ss = _rows(p)
    src, dst = int(p["src_addr"]), int(p["dst_addr"])
    return ([(p["src_space"], src, src + ss * (rows - 1) + rb)],
            [(p["dst_space"], dst, dst + rows * int(p["row_elems"]) * 2)])


def unpack(st: MemoryStore, p: dict[str, Any]) -> tuple[str, int, np.ndarray, str]:
    """The bf16 bytes a ``dma_unpack`` record writes: (space, address, bytes, "bytes")."""
    rows, rb, ss = _rows(p)
    src = int(p["src_addr"])
    vals = np.concatenate([block_float.decode(st.read_bytes(p["src_space"], src + r * ss, rb),
                                              p["fmt"]) for r in range(rows)])
    return p["dst_space"], int(p["dst_addr"]), vals.astype(ml_dtypes.bfloat16).view(np.uint8), \
        "bytes"
