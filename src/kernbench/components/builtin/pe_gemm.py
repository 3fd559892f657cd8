"""PE_GEMM: a rows × cols systolic array (compute only, registers in/out).

The busy cycles of a tile are the class method `compute_cycles`; another matrix-engine
model (tile_engine.py, or a plugin) subclasses this engine and overrides only that.

Busy time of an (m, n, k) tile = SCALE-Sim's compute cycles for the array and dataflow
(components/builtin/systolic.py, checked against SCALE-Sim 3.0.0) divided by the
throughput factor of the operand bitwidth (max of weight and activation bits), over the
clock; a grouped tile (param `groups`) runs its groups one after another. Weights may
stream straight from HBM: stage params `weight_stream_nbytes` and
`weight_addr` make the tile also wait for that transfer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simpy.events import Event

from kernbench.common.pe_commands import StageSpec
from kernbench.common.tile_plan import StageType
from kernbench.components.actions import mac_action
from kernbench.components.arbiter import done_at, pending, token_key
from kernbench.components.base import PeEngineBase
from kernbench.components.builtin.systolic import systolic_compute_cycles
from kernbench.components.catalog import TIMING_MODELS, register
from kernbench.components.fabric import transfer
from kernbench.config.schema import FIDELITY_PHASES
from kernbench.errors import InputError
from kernbench.topology.peaks import pe_macs_per_ns, throughput_factor

if TYPE_CHECKING:
    from kernbench.config.schema import PeGemmSpec


def gemm_cycles(spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
    """Busy cycles of an (m, n, k) tile at `bits`-bit operands on the matrix engine `spec`
    describes: the registered timing model of `spec.impl` answers (the one home of this
    question: the engine and the compiler's cost model call it). Plugins are registered
    when the topology is built (registry.lookup); an impl unknown here is an InputError."""
    cls = TIMING_MODELS.get(("pe_gemm", spec.impl))
    if cls is None:
        known = sorted(i for k_, i in TIMING_MODELS if k_ == "pe_gemm")
        raise InputError(f"no timing model '{spec.impl}' for kind 'pe_gemm' "
                         f"(known: {', '.join(known)})", where="cube.pe_template.pe_gemm",
                         field="impl")
    return cls.compute_cycles(spec, m, n, k, bits)


@register("pe_gemm", "pe_gemm_v1")
class PeGemm(PeEngineBase):
    CHANNELS = {"main": (StageType.GEMM,)}

    @classmethod
    def compute_cycles(cls, spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
        """SCALE-Sim's compute cycles of the systolic array over the throughput factor of
        `bits`, times the math-fidelity passes, rounded up."""
        raw = systolic_compute_cycles(m, n, k, spec.rows, spec.cols, spec.dataflow)
        phases = FIDELITY_PHASES[spec.math_fidelity]
        return math.ceil(raw * phases / throughput_factor(spec, bits))

    def connect(self) -> None:
        self.pe = self.sim.topology.pe(self.node.pe)
        self.macs = 0
        self._cache: dict[tuple[int, int, int, int], int] = {}

    def cycles(self, m: int, n: int, k: int, bits: int) -> int:
        key = (m, n, k, bits)
        c = self._cache.get(key)
        if c is None:
            c = self.compute_cycles(self.spec, m, n, k, bits)
            self._cache[key] = c
        return c

    def fed_stages(self, fetch: StageSpec, gemm: StageSpec,
                   store: StageSpec) -> list[StageSpec]:
        """The FETCH → GEMM → STORE stages of one tile as this engine runs them: here one
        after another, unchanged (an engine that streams its operands overrides this)."""
        return [fetch, gemm, store]

    def _busy(self, p: dict) -> tuple[float, int, int]:
        """(busy ns, MACs, operand bits) of the GEMM stage params `p`, counting its MACs."""
        m, n, k = p["m"], p["n"], p["k"]
        groups = p.get("groups", 1)  # a grouped conv tile: the groups run one after another
        bits = max(p.get("qbits_weight", 8), p.get("qbits_activation", 8))
        self.macs += m * n * k * groups
        return groups * self.cycles(m, n, k, bits) / self.spec.clock_ghz, m * n * k * groups, bits

    def service(self, token) -> float | Event:  # noqa: ANN001
        """The array's busy time; with a weight stream, the stream's reservation at this
        instant's grant (components.arbiter) and the later of the two ends."""
        p = token.params
        busy, macs, bits = self._busy(p)
        stream = p.get("weight_stream_nbytes", 0)
        cmd = token.pipeline_ctx.command
        if stream:
            stages = self.sim.dma_stages(self.pe, "hbm", p.get("weight_addr", 0), stream,
                                         False, f"{token.label} weight stream")
            ev = pending(self.env)
            self.sim.arbiter.request(token_key(token), self._stream, cmd, stream, stages,
                                     busy, macs, bits, ev)
            return ev
        now = self.env._now
        self.sim.actions.add(cmd, mac_action(bits), macs, now, now + busy)
        return busy

    def _stream(self, cmd, stream: int, stages: list, busy: float, macs: int,  # noqa: ANN001
                bits: int, ev: Event) -> None:
        now = self.env._now
        end = transfer(now, stream, stages[:-1])  # straight to the array, not TCM
        self.sim.actions.dma(cmd, "hbm", stream, stages[1:-1], None, now, end)
        busy = max(busy, end - now)
        self.sim.actions.add(cmd, mac_action(bits), macs, now, now + busy)
        done_at(self.env, ev, now + busy)

    def peak_macs_per_ns(self, bits: int) -> float:
        """Peak MACs per ns of this array at `bits`-bit operands (topology.peaks)."""
        return pe_macs_per_ns(self.spec, bits)

    def stats(self) -> dict:
        return {"macs": self.macs}
