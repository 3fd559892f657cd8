"""Placement pass: the program order of the tile ops.

Within each lowering phase the per-PE op streams are merged round-robin, one op per PE in
turn, so that the Control FSM's in-order fetch window always holds work for every PE;
phases stay in order, so every dependency points back. (Which PE a tile runs on is
decided while lowering: `kernbench.compiler.lower.placement`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.region import Region, StorageUse
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import TileOp


def interleave(ops: list[TileOp], first: int = 0) -> list[TileOp]:
    """`ops` (whole lowering phases, in lowering order) in program order, indexed from
    `first`: within each phase the per-PE streams merged round-robin."""
    order: list[TileOp] = []
    i = 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j].stream == ops[i].stream:
            j += 1
        streams: dict[int, list[TileOp]] = {}
        for o in ops[i:j]:
            streams.setdefault(o.pe, []).append(o)
        queues = [streams[pe] for pe in sorted(streams)]
        pos = [0] * len(queues)
        remaining = j - i
        while remaining:
            for qi, q in enumerate(queues):
                if pos[qi] < len(q):
                    order.append(q[pos[qi]])
                    pos[qi] += 1
                    remaining -= 1
        i = j
    for idx, o in enumerate(order, first):
        o.index = idx
    return order


@dataclass(frozen=True)
class Place:
    """Program order: per-PE op streams merged round-robin within each lowering phase."""

    name: str = "placement"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("order",)

    def apply(self, state: CompileState) -> CompileState:
        tiles = state.require_tiles()
        tiles.ops = interleave(tiles.ops)
        return state

    def on_regions(self, state: CompileState, use: StorageUse) -> PlaceRegions:
        return PlaceRegions()


@dataclass
class PlaceRegions:
    """The placement pass region by region: a region's ops in program order, indexed on
    from the ops of the regions before it."""

    placed: int = 0

    def feed(self, region: Region) -> None:
        region.ops = interleave(region.ops, self.placed)
        self.placed += len(region.ops)

    def end(self, region: Region) -> None:
        pass
