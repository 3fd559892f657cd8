"""M_CPU: the cube's command processor, running the CMDQ Control FSM (spec §3.2, §13).

Fetch is in order. A fetched entry takes a slot of the issue window until it completes;
among fetched entries, any whose `deps` have all completed is issued (lowest id first),
one per `issue_latency_cycles`. A command travels over the mesh to its PE's PE_CPU
(`command_bytes` over the fabric), and its completion travels back the same way before
the FSM counts it as complete. BARRIER stops fetching until its `wait_for` (and deps)
have completed; NOP completes when issued; END stops fetching, and the program is done
when every issued entry has completed.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import simpy

from kernbench.components.base import ComponentBase
from kernbench.components.fabric import transfer
from kernbench.components.registry import register

if TYPE_CHECKING:
    from kernbench.common.program import ProgramEntry


@register("m_cpu", "m_cpu_v1")
class MCpu(ComponentBase):
    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self._wake: simpy.Event | None = None
        self.issued = 0

    def run_program(self, entries: list[ProgramEntry]) -> simpy.Event:
        """Start executing `entries`; the returned event fires when the program has ended."""
        done = self.env.event()
        self.env.process(self._fsm(entries, done))
        return done

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.triggered:
            w.succeed()

    def _fsm(self, entries: list[ProgramEntry], done: simpy.Event):  # noqa: ANN202
        env = self.env
        tracer = self.sim.tracer
        window = self.spec.issue_window
        issue_ns = self.spec.issue_latency_cycles / self.spec.clock_ghz
        n = len(entries)
        complete = bytearray(n)
        missing = [0] * n                       # unresolved deps of each fetched entry
        dependents: dict[int, list[int]] = {}   # incomplete id → fetched entries waiting on it
        ready: list[int] = []                   # heap of fetched, ready, unissued ids
        in_window = 0
        fetch = 0
        stopped = False
        outstanding = 0
        completions = 0

        def finish(e: ProgramEntry) -> None:
            nonlocal in_window, outstanding, completions
            completions += 1
            e.end_ns = env.now
            complete[e.id] = 1
            in_window -= 1
            outstanding -= 1
            for w in dependents.pop(e.id, ()):
                missing[w] -= 1
                if missing[w] == 0:
                    heapq.heappush(ready, w)
            self._poke()

        while True:
            seen = completions
            # fetch in order while the window has room
            while not stopped and fetch < n and in_window < window:
                e = entries[fetch]
                if e.kind == "barrier":
                    if all(complete[d] for d in e.wait_for) and all(complete[d] for d in e.deps):
                        e.fetch_ns = e.issue_ns = e.start_ns = e.end_ns = env.now
                        complete[e.id] = 1
                        for w in dependents.pop(e.id, ()):
                            missing[w] -= 1
                            if missing[w] == 0:
                                heapq.heappush(ready, w)
                        tracer.event(env.now, "barrier_pass", self.id, e.label or f"#{e.id}")
                        fetch += 1
                        continue
                    break
                if e.kind == "end":
                    e.fetch_ns = env.now
                    stopped = True
                    break
                e.fetch_ns = env.now
                for d in e.deps:
                    if not complete[d]:
                        missing[e.id] += 1
                        dependents.setdefault(d, []).append(e.id)
                if missing[e.id] == 0:
                    heapq.heappush(ready, e.id)
                in_window += 1
                fetch += 1
            # issue every ready fetched entry, lowest id first
            while ready:
                e = entries[heapq.heappop(ready)]
                if issue_ns:
                    yield env.timeout(issue_ns)
                e.issue_ns = env.now
                self.issued += 1
                outstanding += 1
                if e.kind == "nop" or e.command is None:
                    e.start_ns = env.now
                    finish(e)
                else:
                    self._send(e, finish)
            if outstanding == 0 and not ready:
                if stopped:
                    end = entries[fetch]
                    if all(complete[d] for d in end.deps):
                        end.issue_ns = end.start_ns = end.end_ns = env.now
                        complete[end.id] = 1
                        done.succeed(env.now)
                        return
                elif fetch >= n:
                    done.succeed(env.now)  # no END: validated programs always have one
                    return
            if completions != seen or (
                not stopped and fetch < n and in_window < window
                and entries[fetch].kind != "barrier"
            ):
                continue  # something completed while issuing: fetch and issue again
            self._wake = env.event()
            yield self._wake
            self._wake = None

    def _send(self, e: ProgramEntry, finish) -> None:  # noqa: ANN001
        env = self.env
        sim = self.sim
        pe = sim.topology.pe(e.pe)
        nbytes = self.spec.command_bytes
        path = sim.command_path(self.node.cube, pe, to_pe=True)
        arrive = transfer(env.now, nbytes, path)
        cmd = e.command
        sim.actions.links(cmd, path, nbytes, env.now, arrive)
        cmd.meta["entry"] = e
        pe_cpu = sim.components[f"{pe.id}.pe_cpu"]

        cmd.meta["pe_id"] = pe.id

        def deliver(_ev) -> None:  # noqa: ANN001
            cmd.submit_ns = env.now
            pe_cpu.inbox.put(cmd)

        def completed(_ev) -> None:  # noqa: ANN001
            path_back = sim.command_path(self.node.cube, pe, to_pe=False)
            back = transfer(env.now, nbytes, path_back)
            sim.actions.links(cmd, path_back, nbytes, env.now, back)
            t = env.timeout(back - env.now)
            t.callbacks.append(lambda _e: finish(e))

        cmd.done = env.event()
        cmd.done.callbacks.append(completed)
        t = env.timeout(arrive - env.now)
        t.callbacks.append(deliver)
