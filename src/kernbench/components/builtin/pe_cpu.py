"""PE_CPU: receives commands (from M_CPU over the mesh, or a kernel runner) and submits
them to PE_SCHEDULER's SubmissionQueue (ADR-0014 D1). It never touches engine queues."""

from __future__ import annotations

import simpy

from kernbench.components.base import ComponentBase
from kernbench.components.registry import register


@register("pe_cpu", "pe_cpu_v1")
class PeCpu(ComponentBase):
    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self.inbox = simpy.Store(self.env, capacity=self.spec.queue_depth)

    def connect(self) -> None:
        pe_id = self.id.rsplit(".", 1)[0]
        self.out_ports["scheduler"] = self.sim.components[f"{pe_id}.pe_scheduler"].inbox

    def start(self) -> None:
        self.env.process(self._worker())

    def _worker(self):  # noqa: ANN202
        env = self.env
        delay = self.spec.dispatch_latency_cycles / self.spec.clock_ghz
        sq = self.out_ports["scheduler"]
        while True:
            cmd = yield self.inbox.get()
            if delay:
                yield env.timeout(delay)
            yield sq.put(cmd)
