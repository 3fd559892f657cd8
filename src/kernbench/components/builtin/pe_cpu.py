"""PE_CPU: receives commands (from M_CPU over the mesh, or a kernel runner) and submits
them to PE_SCHEDULER's SubmissionQueue. It never touches engine queues."""

from __future__ import annotations

import simpy

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.ports import Port
from kernbench.components.queues import HwQueue


@register("pe_cpu", "pe_cpu_v1")
class PeCpu(ComponentBase):
    PORTS = (Port("scheduler", "pe_scheduler", doc="its PE's SubmissionQueue"),)

    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self.inbox = HwQueue(self.env, capacity=self.spec.queue_depth)

    def connect(self) -> None:
        self.submission_queue: simpy.Store = self.peer("scheduler").inbox

    def start(self) -> None:
        self.env.process(self._worker())

    def _worker(self):  # noqa: ANN202
        env = self.env
        delay = self.spec.dispatch_latency_cycles / self.spec.clock_ghz
        sq = self.submission_queue
        while True:
            cmd = yield self.inbox.get()
            if delay:
                yield env.timeout(delay)
            yield sq.put(cmd)
