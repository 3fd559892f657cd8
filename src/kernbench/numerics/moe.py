"""Mixture-of-experts routing on indices: which token rows each expert computes.

`moe_route(idx, n_experts=E, counts=c)` takes the router's choice `idx` int [T, k]
(token t, slot j) and returns, as int64 arrays,

- for every expert e with `c_e > 0`, in expert order, `rows_e` [c_e]: the tokens that
  chose e, ascending (a stable counting sort over the T·k pairs);
- for every slot j, `pos_j` [T]: the row of the expert outputs stacked in that order
  (`concat(rows_e)`) that holds pair (t, j) (the combine reads it there).

A compiled program has one GEMM per expert of a fixed row count, so the choice must route
exactly `counts[e]` pairs to expert e; any other count is a `KernelError` naming the first
expert that differs.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics.errors import KernelError

__all__ = ["moe_route"]


def moe_route(idx: np.ndarray, *, n_experts: int, counts: list[int]) -> list[np.ndarray]:
    """[rows_e for the chosen experts] + [pos_j for every slot] (module docstring)."""
    k = idx.shape[-1]
    flat = idx.reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= n_experts):
        raise KernelError(f"expert index outside 0..{n_experts - 1}")
    got = np.bincount(flat, minlength=n_experts)
    for e, (g, want) in enumerate(zip(got.tolist(), counts, strict=True)):
        if g != want:
            raise KernelError(f"expert {e} was chosen by {g} tokens; the program was "
                              f"compiled for {want}")
    order = np.argsort(flat, kind="stable")
    rows = (order // k).astype(np.int64)
    pos = np.empty(flat.size, dtype=np.int64)
    pos[order] = np.arange(flat.size, dtype=np.int64)
    pos = pos.reshape(-1, k)
    edges = np.cumsum([0, *counts])
    out = [rows[edges[e]:edges[e + 1]] for e in range(n_experts) if counts[e] > 0]
    return out + [np.ascontiguousarray(pos[:, j]) for j in range(k)]
