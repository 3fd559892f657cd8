"""Seeded inputs that are valid for a model: token ids inside the vocabulary, masks of
ones, small normal floats elsewhere. Used for calibration and default verification."""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph
from kernbench.numerics.dtypes import np_dtype


def vocab_size(g: Graph, tid: str, seen: set[str] | None = None) -> int | None:
    """Size of the table an integer input `tid` indexes (through views), if any: token ids
    must lie in [0, vocab_size)."""
    seen = seen or set()
    for cid in g.tensors[tid].consumers:
        n = g.node(cid)
        if n.op_type in ("EMBEDDING", "GATHER") and n.inputs[0] == tid:
            return g.tensors[n.inputs[1]].shape[0]
        if n.op_type in ("EMBEDDING",) and tid in n.inputs[:1]:
            return g.tensors[n.inputs[1]].shape[0]
        if n.op_type in ("RESHAPE", "IDENTITY", "TRANSPOSE") and n.id not in seen:
            seen.add(n.id)
            v = vocab_size(g, n.outputs[0], seen)
            if v:
                return v
    return None


def default_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """One seeded array per graph input: masks of ones, token ids inside the vocabulary,
    booleans true, floats ~ N(0, 0.25)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for tid in g.inputs:
        t = g.tensors[tid]
        shape = tuple(t.shape)
        dt = np_dtype(t.dtype)
        if "mask" in tid.lower():
            feeds[tid] = np.ones(shape, dtype=dt)
        elif np.issubdtype(dt, np.integer):
            hi = vocab_size(g, tid) or 2
            feeds[tid] = rng.integers(0, hi, size=shape).astype(dt)
        elif dt == np.bool_:
            feeds[tid] = np.ones(shape, dtype=bool)
        else:
            feeds[tid] = (rng.standard_normal(shape) * 0.5).astype(dt)
    return feeds
