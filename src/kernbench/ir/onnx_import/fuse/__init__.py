"""Pattern fusion: each module rewrites one pattern of primitive layers into an IR op.

`run_fusions` applies them in a fixed order; every pass leaves a valid graph."""

from __future__ import annotations

from kernbench.ir.model import Graph

PASSES: list = []


def run_fusions(g: Graph) -> None:
    for p in PASSES:
        p(g)
