"""Whole-layer-op census of a compiled CMDQ: how much of a program runs as TE_LAYER_OP /
VE_LAYER_OP (a whole layer on one PE) instead of tiles.

`layer_op_census(entries)` takes the `cmdq` list of a bundle's cmdq.json (or the CmdqProgram
entries as dicts) and counts entries, whole-layer ops by opcode and by the layer each came
from; `layer_op_census_of_bundle(path)` reads a bundle folder. `benchmarks/zoo_table.py`,
`scripts/layer_op_census.py` and the tests use it, so "how much still runs whole" is
measured one way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the opcodes that run a whole layer on one PE
LAYER_OPCODES = ("TE_LAYER_OP", "VE_LAYER_OP")


@dataclass(frozen=True)
class LayerOpCensus:
    """Counts over one CMDQ program.

    entries: all entries; by_opcode: whole-layer entries per opcode; layers: layer id →
    whole-layer opcode (sorted by layer id); ops: the VE_LAYER_OP `op` field → count."""

    entries: int
    by_opcode: dict[str, int] = field(default_factory=dict)
    layers: dict[str, str] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def whole(self) -> int:
        """Whole-layer entries of any kind."""
        return sum(self.by_opcode.values())

    @property
    def share(self) -> float:
        """Whole-layer entries / all entries (0 for an empty program)."""
        return self.whole / self.entries if self.entries else 0.0

    def line(self) -> str:
        """One human-readable summary line."""
        te, ve = self.by_opcode.get("TE_LAYER_OP", 0), self.by_opcode.get("VE_LAYER_OP", 0)
        return (f"{self.entries} entries, {te} TE_LAYER_OP, {ve} VE_LAYER_OP "
                f"({100 * self.share:.1f}% whole-layer)")


def layer_op_census(entries: Iterable[Mapping[str, Any]]) -> LayerOpCensus:
    """Count whole-layer ops in CMDQ entries (dicts with `opcode`, `layer_id`, `op`)."""
    n = 0
    by_opcode: dict[str, int] = {}
    layers: dict[str, str] = {}
    ops: dict[str, int] = {}
    for e in entries:
        n += 1
        oc = str(e.get("opcode"))
        if oc not in LAYER_OPCODES:
            continue
        by_opcode[oc] = by_opcode.get(oc, 0) + 1
        layers[str(e.get("layer_id"))] = oc
        op = str(e.get("op") or oc)
        ops[op] = ops.get(op, 0) + 1
    return LayerOpCensus(n, dict(sorted(by_opcode.items())), dict(sorted(layers.items())),
                         dict(sorted(ops.items())))


def layer_op_census_of_bundle(bundle: str | Path) -> LayerOpCensus:
    """The census of a compiled bundle folder (its cmdq.json)."""
    data = json.loads((Path(bundle) / "cmdq.json").read_text())
    return layer_op_census(data["cmdq"])
