"""Which engine inside a PE a tile op runs on (`te_id` / `ve_id`, ADR-0701).

A PE may have several tensor engines (`pe_gemm.count`) and several vector engines
(`pe_math.count`); the PE scheduler routes a command to engine `te_id` / `ve_id`. The
GEMM lowering gives independent output tiles of one PE different tensor engines (the K
loop of one accumulator stays on its engine: its partial sums live there); vector tiles
take the vector engines of their PE in turn.

With one engine of a kind the field is not emitted at all: a program for a one-engine PE
is byte-identical to one compiled before engines were assigned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineCursor:
    """The engine counts of every PE of the topology and the next vector engine per PE."""

    te_count: int
    ve_count: int
    _next_ve: dict[int, int] = field(default_factory=dict)

    def te(self, index: int) -> dict[str, Any]:
        """The CMDQ field of the `index`-th independent accumulator of a PE's group of
        output tiles: `{"te_id": index mod count}`, or nothing with one tensor engine."""
        return {"te_id": index % self.te_count} if self.te_count > 1 else {}

    def ve(self, pe: int) -> dict[str, Any]:
        """The CMDQ field of the next vector tile on `pe` (its vector engines in turn), or
        nothing with one vector engine."""
        if self.ve_count <= 1:
            return {}
        v = self._next_ve.get(pe, 0)
        self._next_ve[pe] = (v + 1) % self.ve_count
        return {"ve_id": v}
