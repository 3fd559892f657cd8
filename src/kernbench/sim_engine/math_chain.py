"""The data pass's ``chain`` op: a VE_FUSED_TILE's steps applied in turn.

The record's inputs are the operands the steps fetch, in step order. Param ``steps``
lists per step its own math op and params, where each of its inputs comes from
(``srcs``: null takes the next record input, [j, o] output o of step j), the shapes and
types it reads them as (``input_shapes``, ``input_dtypes``), whether its op has several
outputs (``multi``) and each output's [shape, dtype] (``outs``). Param ``stored`` lists
the [step, output] pairs the record writes, in the order of its destinations. A forwarded
value reaches its reader exactly as a store to TCM and a load back would give it: cast to
the writer's output type, its bytes read as the reader's type and shape. A chain is
therefore bit-identical to its steps run as separate entries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kernbench.numerics.dtypes import canon, np_dtype
from kernbench.sim_engine.math_registry import MATH_OPS, math_op


def as_stored(y: npt.ArrayLike, shape: list[int], dtype: str) -> np.ndarray:
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
def _chain(ins: list[np.ndarray], p: dict[str, Any]) -> Any:
    rest = iter(ins)
    results: list[list[np.ndarray]] = []
    for i, step in enumerate(p["steps"]):
        args = []
        for src, shp, dt in zip(step["srcs"], step["input_shapes"], step["input_dtypes"],
                                strict=True):
            if src is None:
                v = next(rest, None)
                if v is None:
                    raise ValueError(f"chain: step {i} needs more inputs than the record has")
                args.append(v)
            else:
                args.append(as_loaded(results[src[0]][src[1]], shp, dt))
        y = MATH_OPS[step["op"]](args, step)
        ys = list(y) if step["multi"] else [y]
        if len(ys) != len(step["outs"]):
            raise ValueError(f"chain: step {i} gave {len(ys)} outputs, expected "
                             f"{len(step['outs'])}")
        results.append([as_stored(yk, shp, dt)
                        for yk, (shp, dt) in zip(ys, step["outs"], strict=True)])
    if next(rest, None) is not None:
        raise ValueError(f"chain: inputs left over after {len(p['steps'])} steps")
    out = [results[j][o] for j, o in p["stored"]]
    return out if "dst_addrs" in p else out[0]
