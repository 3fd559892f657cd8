"""How much of a compiled program runs as whole-layer ops (VE_LAYER_OP / TE_LAYER_OP).

A whole-layer op is the lowering's fallback: the layer runs on ONE PE. `layer_op_census`
counts them per (opcode, IR op type) from a compiled state, so tests and benchmarks can
assert that TE-shaped layers (matmuls, attention, convolutions) are tiled:

    state, _ = compile_graph(graph, topology)
    c = layer_op_census(state)
    c.te_shaped            # whole-layer ops whose IR op belongs on the tensor engine
    c.by_op                # {("TE_LAYER_OP", "MATMUL"): 4, ...}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import TileOp

#: IR op types that belong on the tensor engine: whole, they waste all PEs but one
TE_SHAPED = frozenset({"MATMUL", "GEMM", "QKV_PROJ", "ATTENTION", "CONV", "EINSUM",
                       "MATMUL_INTEGER", "QLINEAR_MATMUL", "QLINEAR_CONV",
                       "CONV_INTEGER"})
LAYER_OPCODES = ("VE_LAYER_OP", "TE_LAYER_OP")


@dataclass(frozen=True)
class LayerOpCensus:
    """Whole-layer ops of one compiled program: CMDQ entries in all, and the layer ops
    per (opcode, IR op type)."""

    entries: int
    by_op: dict[tuple[str, str], int]
    layers: tuple[str, ...] = ()  # the layers that run whole, in program order

    def note(self) -> str | None:
        """One line for stderr naming what runs whole (None when everything is tiled):
        a fallback is a reported fact, never a quiet one."""
        if not self.total:
            return None
        kinds = ", ".join(f"{op} as {opcode} ×{c}" for (opcode, op), c in self.by_op.items())
        names = ", ".join(self.layers[:5]) + (", …" if len(self.layers) > 5 else "")
        n = len(self.layers) or self.total
        return (f"whole-layer ops: {n} layer{'s' if n > 1 else ''} run{'' if n > 1 else 's'} "
                f"on one PE instead of tiles ({kinds}: {names}); docs/onnx-support.md says "
                "what still runs whole")

    @property
    def total(self) -> int:
        """All whole-layer ops."""
        return sum(self.by_op.values())

    def of(self, op_types: frozenset[str] | set[str]) -> int:
        """Whole-layer ops whose IR op type is one of `op_types`."""
        return sum(c for (_, op), c in self.by_op.items() if op in op_types)

    @property
    def te_shaped(self) -> int:
        """Whole-layer ops of TE-shaped IR layers (`TE_SHAPED`)."""
        return self.of(TE_SHAPED)

    @property
    def share(self) -> float:
        """Fraction of the CMDQ entries that are whole-layer ops."""
        return self.total / self.entries if self.entries else 0.0


class CensusCounter:
    """Whole-layer ops counted as ops come (`add`), by the IR op type of their layer."""

    def __init__(self, op_type: dict[str, str]) -> None:
        self.op_type = op_type
        self.counts: Counter[tuple[str, str]] = Counter()
        self.layers: dict[str, None] = {}

    def add(self, ops: Iterable[TileOp]) -> None:
        for op in ops:
            if op.opcode in LAYER_OPCODES:
                self.counts[(op.opcode, self.op_type.get(op.layer, "?"))] += 1
                self.layers[op.layer] = None

    def census(self, entries: int) -> LayerOpCensus:
        return LayerOpCensus(entries, dict(sorted(self.counts.items())), tuple(self.layers))


def layer_op_census(state: CompileState) -> LayerOpCensus:
    """Count the whole-layer ops of a compiled state (after the tiling pass) by the IR op
    type of the layer each runs."""
    tiles = state.require_tiles()
    counter = CensusCounter({n.id: n.op_type for n in state.graph.nodes})
    counter.add(tiles.ops)
    entries = len(state.cmdq.entries) if state.cmdq is not None else len(tiles.ops) + 1
    return counter.census(entries)


__all__ = ["LAYER_OPCODES", "TE_SHAPED", "CensusCounter", "LayerOpCensus", "layer_op_census"]
