"""PE_MATH: SIMD vector unit (compute only, registers in/out).

Busy cycles of an op on `rows` vectors of `length` elements:
pipeline_latency_cycles + ceil(rows × length / lanes) × op_cycles[op]. A command of
several steps (VE_FUSED_TILE: stage param `steps`, a list of (op, length,
rows)) costs the sum of its steps' cycles: each step keeps its own pipeline fill, only
the TCM fetch and store between them are gone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kernbench.common.tile_plan import StageType
from kernbench.components.base import PeEngineBase
from kernbench.components.catalog import register
from kernbench.errors import SimulationError

if TYPE_CHECKING:
    from kernbench.config.schema import PeMathSpec


def math_cycles(spec: PeMathSpec, op: str, length: int, rows: int = 1) -> int:
    """Busy cycles of `op` on `rows` vectors of `length` elements (the module formula);
    KeyError when the cost table has no `op`. The one home of this formula: the engine
    and the compiler's cost model (kernbench.compiler.cost) both call it."""
    per = spec.op_cycles[op]
    return spec.pipeline_latency_cycles + math.ceil(math.ceil(rows * length / spec.lanes) * per)


def stage_steps(params: dict) -> list[tuple[str, int, int]]:
    """The (op, length, rows) of each step of a MATH stage: its `steps`, or its one op."""
    return params.get("steps") or [(params["op"], params["length"], params.get("rows", 1))]


def stage_cycles(spec: PeMathSpec, params: dict) -> int:
    """Busy cycles of one MATH stage: the sum over its steps (`stage_steps`)."""
    return sum(math_cycles(spec, op, length, rows) for op, length, rows in stage_steps(params))


@register("pe_math", "pe_math_v1")
class PeMath(PeEngineBase):
    CHANNELS = {"main": (StageType.MATH,)}

    def cycles(self, op: str, length: int, rows: int = 1) -> int:
        s = self.spec
        try:
            return math_cycles(s, op, length, rows)
        except KeyError:
            raise SimulationError(
                f"{self.id}: no cost for op '{op}' (known: {', '.join(sorted(s.op_cycles))})"
            ) from None

    def connect(self) -> None:
        # (op, length, rows) → `cycles`: the service asks the same few shapes again and
        # again, and `cycles` is a function of them and the (fixed) spec
        self._cycles: dict[tuple[str, int, int], int] = {}

    def service(self, token) -> float:  # noqa: ANN001
        p = token.params
        steps = stage_steps(p)
        known = self._cycles
        cycles = 0
        for op, length, rows in steps:
            key = (op, length, rows)
            c = known.get(key)
            if c is None:
                c = known[key] = self.cycles(op, length, rows)
            cycles += c
        spec = self.spec
        busy = cycles / spec.clock_ghz
        # every lane is busy for the cycles after each step's pipeline fill
        now = self.env._now
        fill = len(steps) * spec.pipeline_latency_cycles
        self.sim.actions.add(token.pipeline_ctx.command, "math_lane_cycle",
                             (cycles - fill) * spec.lanes, now, now + busy)
        return busy
