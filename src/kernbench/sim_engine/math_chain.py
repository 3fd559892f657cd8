"""The data pass's ``chain`` op: a VE_FUSED_TILE's steps applied in turn (ADR-0724).

The record's inputs are every step's inputs but the chained ones, in step order; param
``steps`` lists per step its own math op and params, how many of the inputs it takes
(``inputs``), its ``shape_out`` and ``dtype`` and how it reads its first input
(``in_shape``, ``in_dtype``). Step i > 0 gets the previous step's result as its first
input exactly as a store to TCM and a load back would give it: cast to the previous
step's output type, its bytes read as the step's input type and shape. A chain is
therefore bit-identical to its steps run as separate entries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.dtypes import canon, np_dtype
from kernbench.sim_engine.math_registry import MATH_OPS, math_op


def as_stored(y: Any, shape: list[int], dtype: str) -> np.ndarray:
    """`y` as a math record's output of `shape` and `dtype` is written."""
    y = np.asarray(y)
    shp = tuple(shape)
    if y.shape != shp:
        y = y.reshape(shp) if y.size == int(np.prod(shp, dtype=np.int64)) \
            else np.broadcast_to(y, shp)
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(y.astype(np_dtype(canon(dtype))))


def as_loaded(stored: np.ndarray, shape: list[int], dtype: str) -> np.ndarray:
    """The bytes of `stored` read back as `shape` values of `dtype` (what a load of that
    TCM range gives; the chain's validation makes the byte counts equal)."""
    return np.frombuffer(stored.tobytes(), np_dtype(canon(dtype))).reshape(tuple(shape))


@math_op("chain")
def _chain(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    rest = list(ins)
    prev: np.ndarray | None = None
    for step in p["steps"]:
        n = int(step["inputs"])
        args, rest = rest[:n], rest[n:]
        if prev is not None:
            args = [as_loaded(prev, step["in_shape"], step["in_dtype"]), *args]
        fn = MATH_OPS[step["op"]]
        prev = as_stored(fn(args, step), step["shape_out"], step["dtype"])
    if rest or prev is None:
        raise ValueError(f"chain: {len(rest)} inputs left over after {len(p['steps'])} steps")
    return prev
