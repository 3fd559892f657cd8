"""PE_CPU: receives commands (from M_CPU over the mesh, or a kernel runner) and submits
them to PE_SCHEDULER's SubmissionQueue. It never touches engine queues.

It handles one command at a time, in arrival order: `dispatch_latency_cycles` after it
takes a command it puts it into the SubmissionQueue, and it takes the next one once that
put has completed (a full SubmissionQueue holds it). Commands that arrive while it is busy
wait in its inbox. It is a plain state machine, not a SimPy process: its only events are
the dispatch delay and the put.
"""

from __future__ import annotations

from collections import deque

from simpy.events import Event

from kernbench.components.arbiter import call_after
from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.fabric import mypyc_attr
from kernbench.components.ports import Port
from kernbench.components.queues import HwQueue


class Inbox:
    """PE_CPU's inbox as a deadlock report reads a queue: the commands it holds (up to
    its capacity) and those beyond it (blocked puts)."""

    __slots__ = ("waiting", "capacity")

    def __init__(self, capacity: int) -> None:
        self.waiting: deque = deque()
        self.capacity = capacity

    @property
    def items(self) -> list:
        return list(self.waiting)[: self.capacity]

    @property
    def put_queue(self) -> list:
        return list(self.waiting)[self.capacity:]


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class PeCpu(ComponentBase):
    PORTS = (Port("scheduler", "pe_scheduler", doc="its PE's SubmissionQueue"),)

    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self.inbox = Inbox(self.spec.queue_depth)
        self._busy = False
        self._delay = self.spec.dispatch_latency_cycles / self.spec.clock_ghz

    def connect(self) -> None:
        self.submission_queue: HwQueue = self.peer("scheduler").inbox

    def submit(self, cmd) -> None:  # noqa: ANN001
        """A command arrives now."""
        if self._busy:
            self.inbox.waiting.append(cmd)
        else:
            self._take(cmd)

    def _take(self, cmd) -> None:  # noqa: ANN001
        self._busy = True
        if self._delay:
            call_after(self.env, self._delay, lambda _e: self._put(cmd))
        else:
            self._put(cmd)

    def _put(self, cmd) -> None:  # noqa: ANN001
        sq = self.submission_queue
        waiting = self.inbox.waiting
        while True:
            ev = sq.offer(cmd)
            if ev is not None:
                ev.callbacks.append(self._next)  # a full SubmissionQueue holds PE_CPU
                return
            if not waiting:
                self._busy = False
                return
            cmd = waiting.popleft()
            if self._delay:
                self._take(cmd)
                return

    def _next(self, _ev: Event) -> None:
        waiting = self.inbox.waiting
        if waiting:
            self._take(waiting.popleft())
        else:
            self._busy = False


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("pe_cpu", "pe_cpu_v1")(PeCpu)
