"""A program for the cube's command processor (M_CPU): the Control FSM's view of a CMDQ.

The CMDQ layer translates its JSON entries into ProgramEntry objects; M_CPU executes them
without knowing the CMDQ format. Kinds: "command" (send `command` to PE `pe`), "barrier"
(stop fetching until `wait_for` complete), "nop", "end" (stop fetching; the program ends
when everything issued has completed).
"""

from __future__ import annotations

from bisect import bisect_left
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
    the latest end, how many entries, their summed busy time by kind of work
    (dma / tensor engine / vector engine / other, from the opcode's prefix), and per PE the
    union of its entries' [start, end] intervals (`busy_ns`: the longest such union)."""

    start_ns: float
    end_ns: float
    entries: int = 0
    busy_ns: dict[str, float] = field(default_factory=dict)
    #: PE → disjoint [start, end] intervals, sorted (kept short: a PE's entries of one
    #: layer mostly touch or overlap, so they merge)
    per_pe: dict[Any, list[list[float]]] = field(default_factory=dict)
    #: the cost model's estimated end of the layer, when a run estimated it (block replay
    #: prices the replayed blocks by the estimated block period)
    estimate_end_ns: float | None = None

    def add(self, opcode: str, start: float, end: float, pe: Any = None) -> None:
        """One more entry of the layer, [start, end], on PE `pe` (None: not counted per PE)."""
        self.start_ns = min(self.start_ns, start)
        self.end_ns = max(self.end_ns, end)
        self.entries += 1
        kind = _BUSY_KIND.get(opcode[:3], "other")
        self.busy_ns[kind] = self.busy_ns.get(kind, 0.0) + (end - start)
        if pe is not None:
            merge_interval(self.per_pe.setdefault(pe, []), start, end)

    def close(self) -> None:
        """Every entry of the layer has completed: keep each PE's busy total, not its
        intervals (`pe_busy_ns` is unchanged; a streamed run's memory then follows the
        layers, not their entries)."""
        self.per_pe = {pe: [[0.0, sum(e - s for s, e in iv)]] for pe, iv in self.per_pe.items()}

    @property
    def pe_busy_ns(self) -> float:
        """The layer's busy time: over its PEs, the longest union of the PE's entry
        intervals (docs/stats.md `busy_ns`); 0 when no entry named its PE."""
        return max((sum(e - s for s, e in iv) for iv in self.per_pe.values()), default=0.0)


def merge_interval(ivs: list[list[float]], start: float, end: float) -> None:
    """Insert [start, end] into the sorted disjoint intervals `ivs`, merging what touches."""
    if ivs:
        last = ivs[-1]
        s0 = last[0]
        if s0 < start and s0 <= end:  # after the last interval's start (entries retire
            # mostly in time order): the general case below with i at the end
            e0 = last[1]
            if e0 >= start:
                ivs[-1] = [s0, max(end, e0)]
            else:
                ivs.append([start, end])
            return
    else:
        ivs.append([start, end])
        return
    i = bisect_left(ivs, [start, start])
    if i > 0 and ivs[i - 1][1] >= start:
        i -= 1
    j = i
    while j < len(ivs) and ivs[j][0] <= end:
        start = min(start, ivs[j][0])
        end = max(end, ivs[j][1])
        j += 1
    ivs[i:j] = [[start, end]]


def add_span(spans: dict[str, LayerSpan], layer_id: str | None, opcode: str,
             start: float | None, end: float | None, pe: Any = None) -> None:
    """Fold one completed entry into `spans` (layer id → LayerSpan); entries without a
    layer or a start are not a layer's work. `pe` names the PE it ran on (its busy time)."""
    if layer_id is None or start is None or end is None:
        return
    s = spans.get(layer_id)
    if s is None:
        s = spans[layer_id] = LayerSpan(start, end)
    s.add(opcode, start, end, pe)


#: 2**52: below it a double's whole numbers and halves are exact
_EXACT_HALVES = 4503599627370496.0


def round_ns(x: float) -> float:
    """`round(x, 3)` (times in stats.json: ns to 1e-3 ns), bit for bit, without Python's
    decimal conversion where it cannot matter. round(x, 3) is the double nearest D / 1000,
    D the whole number nearest the exact x·1000 (ties to even). y = x·1000 in floating point
    is that product rounded to the nearest double, which is monotonic and keeps a
    representable half where it is: if y lies above the half between two whole numbers,
    so does the exact product, and below likewise. So D is the whole number nearest y
    unless y is that half, and D / 1000 (a whole number divided exactly, the quotient
    rounded to nearest) is the double nearest D / 1000. Halves, zeros, negatives,
    non-finite and huge values take `round`."""
    y = x * 1000.0
    if 0.0 < y < _EXACT_HALVES:
        whole = float(int(y))  # y > 0: int() is the floor
        off = y - whole - 0.5  # exact: y − whole is y's fraction, and halves are doubles
        if off > 0.0:
            return (whole + 1.0) / 1000.0
        if off < 0.0:
            return whole / 1000.0
    return round(float(x), 3)


class LayerTally:
    """Completed entries folded into per-layer spans as the Control FSM retires them (a
    timing run that keeps no per-entry record): rounded like stats rows (`round_ns`), so
    a layer's span is the one its rows would give. `layer_entries`: each layer's entry
    count, to close a layer's span when its last entry retires."""

    def __init__(self, layer_entries: dict[str, int]) -> None:
        self.spans: dict[str, LayerSpan] = {}
        self.done = 0
        self.layers_done = 0
        self._left: dict[str, int] = dict(layer_entries)  # layer → entries not yet retired

    @property
    def layers(self) -> int:
        return len(self._left)

    def __call__(self, e: ProgramEntry) -> None:
        self.done += 1
        cmd = e.command
        if cmd is None:
            return
        lid = cmd.meta.get("layer_id")
        if lid is None:  # not a layer's work (`add_span`)
            return
        start = cmd.start_ns
        if start is None:
            start = e.start_ns
        end = e.end_ns
        add_span(self.spans, lid, e.label.split(" ", 1)[1],
                 round_ns(start) if start is not None else None,
                 round_ns(end) if end is not None else None, e.pe)
        left = self._left.get(lid)
        if left is not None:
            self._left[lid] = left - 1
            if left == 1:
                self.layers_done += 1
                span = self.spans.get(lid)
                if span is not None:
                    span.close()
