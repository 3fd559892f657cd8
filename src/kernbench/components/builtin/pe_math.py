"""PE_MATH: SIMD vector unit (ADR-0021 D6: compute only, registers in/out).

Busy cycles of an op on `rows` vectors of `length` elements:
pipeline_latency_cycles + ceil(rows × length / lanes) × op_cycles[op].
"""

from __future__ import annotations

import math

from kernbench.common.tile_plan import StageType
from kernbench.components.base import PeEngineBase
from kernbench.components.catalog import register
from kernbench.errors import SimulationError


@register("pe_math", "pe_math_v1")
class PeMath(PeEngineBase):
    CHANNELS = {"main": (StageType.MATH,)}

    def cycles(self, op: str, length: int, rows: int = 1) -> int:
        s = self.spec
        try:
            per = s.op_cycles[op]
        except KeyError:
            raise SimulationError(
                f"{self.id}: no cost for op '{op}' (known: {', '.join(sorted(s.op_cycles))})"
            ) from None
        return s.pipeline_latency_cycles + math.ceil(math.ceil(rows * length / s.lanes) * per)

    def service(self, token) -> float:  # noqa: ANN001
        p = token.params
        return self.cycles(p["op"], p["length"], p.get("rows", 1)) / self.spec.clock_ghz
