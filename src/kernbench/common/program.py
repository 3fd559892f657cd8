"""A program for the cube's command processor (M_CPU): the Control FSM's view of a CMDQ.

The CMDQ layer translates its JSON entries into ProgramEntry objects; M_CPU executes them
without knowing the CMDQ format. Kinds: "command" (send `command` to PE `pe`), "barrier"
(stop fetching until `wait_for` complete), "nop", "end" (stop fetching; the program ends
when everything issued has completed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernbench.common.pe_commands import PeCommand


@dataclass(slots=True, eq=False)
class ProgramEntry:
    id: int
    kind: str
    pe: int = 0
    command: PeCommand | None = None
    deps: tuple[int, ...] = ()
    wait_for: tuple[int, ...] = ()
    label: str = ""
    # filled in by the simulation
    fetch_ns: float | None = None
    issue_ns: float | None = None
    start_ns: float | None = None
    end_ns: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


#: what part of a layer's time an entry's opcode counts as (stats `layers[..].bottleneck`)
_BUSY_KIND = {"DMA": "dma", "TE_": "tensor engine", "VE_": "vector engine"}


@dataclass(slots=True)
class LayerSpan:
    """What a layer's CMDQ entries did, aggregated as they completed: the earliest start,
    the latest end, how many entries, and their summed busy time by kind of work
    (dma / tensor engine / vector engine / other, from the opcode's prefix)."""

    start_ns: float
    end_ns: float
    entries: int = 0
    busy_ns: dict[str, float] = field(default_factory=dict)

    def add(self, opcode: str, start: float, end: float) -> None:
        """One more entry of the layer, [start, end]."""
        self.start_ns = min(self.start_ns, start)
        self.end_ns = max(self.end_ns, end)
        self.entries += 1
        kind = _BUSY_KIND.get(opcode[:3], "other")
        self.busy_ns[kind] = self.busy_ns.get(kind, 0.0) + (end - start)


def add_span(spans: dict[str, LayerSpan], layer_id: str | None, opcode: str,
             start: float | None, end: float | None) -> None:
    """Fold one completed entry into `spans` (layer id → LayerSpan); entries without a
    layer or a start are not a layer's work."""
    if layer_id is None or start is None or end is None:
        return
    s = spans.get(layer_id)
    if s is None:
        s = spans[layer_id] = LayerSpan(start, end)
    s.add(opcode, start, end)
