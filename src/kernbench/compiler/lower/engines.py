"""Which engine inside a PE a tile op runs on (`te_id` / `ve_id`).

A PE may have several tensor engines (`pe_gemm.count`) and several vector engines
(`pe_math.count`); the PE scheduler routes a command to engine `te_id` / `ve_id`. The
GEMM lowering gives independent output tiles of one PE different tensor engines (the K
loop of one accumulator stays on its engine: its partial sums live there); vector tiles
take the vector engines of their PE in turn. A row-wise layer is cut into one block per
vector engine of each PE only when a PE's share of the work is large enough to pay for
the extra block's DMA latency and command (`VE_SPLIT_MIN_CYCLES`).

With one engine of a kind the field is not emitted at all: a program for a one-engine PE
is byte-identical to one compiled before engines were assigned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernbench.config.schema import PeTemplate

#: vector cycles a PE's share of a row-wise layer needs, per vector engine, before the
#: layer is cut into one block per engine: a block costs a load and a store of fixed
#: latency and a command round trip, so splitting smaller work over more engines makes
#: it slower (a small LayerNorm cut into one block per engine takes longer than whole)
VE_SPLIT_MIN_CYCLES = 512


@dataclass
class EngineCursor:
    """The engine counts of every PE of the topology and the next vector engine per PE."""

    te_count: int
    ve_count: int
    lanes: int
    op_cycles: dict[str, float]
    _next_ve: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, pe: PeTemplate) -> EngineCursor:
        """The cursor of a PE template (its pe_gemm / pe_math counts and SIMD cost)."""
        return cls(pe.pe_gemm.count, pe.pe_math.count, pe.pe_math.lanes,
                   dict(pe.pe_math.op_cycles))

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

    def ve_blocks(self, rows: int, cols: int, n_pes: int, cost_op: str) -> int:
        """Row blocks per PE for a vector layer of rows × cols elements on `n_pes` PEs:
        the vector-engine count when each engine's share of a PE's rows costs at least
        VE_SPLIT_MIN_CYCLES of `cost_op`, else 1."""
        if self.ve_count <= 1:
            return 1
        per_pe = math.ceil(rows / n_pes) * cols * self.op_cycles.get(cost_op, 1.0) / self.lanes
        return self.ve_count if per_pe / self.ve_count >= VE_SPLIT_MIN_CYCLES else 1
