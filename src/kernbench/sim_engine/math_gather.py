"""The data pass's ops for the typed element-wise and gather tiles, all on
kernbench.numerics (the IR interpreter's own kernels, so a tile computes what the layer
computes on its slice):

- gather_rows: ids [rows] (int32 / int64) and a table [table_rows, row_bytes] (bytes) →
  the picked rows [rows, row_bytes]; a negative index counts from the end; an index out
  of range raises (the data error names it).
- ew: `numerics.elementwise.elementwise` with op `ew_op` (cast's `to`, the op's `attrs`)
  on the inputs broadcast by numpy; fp16 / bf16 inputs are widened to fp32 first, as the
  interpreter holds them.
- cumsum_rows: `numerics.pool.cumsum` along the last axis of [rows, length].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.elementwise import elementwise
from kernbench.numerics.pool import cumsum
from kernbench.sim_engine.math_registry import math_op, widen


@math_op("gather_rows")
def _gather_rows(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    ids = np.asarray(ins[0]).astype(np.int64).reshape(-1)
    table = ins[1]
    n = table.shape[0]
    bad = (ids < -n) | (ids >= n)
    if bad.any():
        raise ValueError(f"gather index {int(ids[bad][0])} is outside a table of {n} rows")
    return table[np.where(ids < 0, ids + n, ids)]


@math_op("ew")
def _ew(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    xs = [widen(np.asarray(x)) for x in ins]
    return elementwise(*xs, op=p["ew_op"], to=p.get("to"), **(p.get("attrs") or {}))


@math_op("cumsum_rows")
def _cumsum_rows(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return cumsum(np.asarray(ins[0]), axis=-1, exclusive=bool(p.get("exclusive")),
                  reverse=bool(p.get("reverse")))
