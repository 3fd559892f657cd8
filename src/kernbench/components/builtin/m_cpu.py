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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import simpy
from simpy.events import URGENT, Event

from kernbench.components.arbiter import BACK_TILE, call_after
from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.fabric import Route
from kernbench.components.ports import Port
from kernbench.components.signals import Signal

if TYPE_CHECKING:
    from kernbench.common.program import ProgramEntry


class _Run:
    """The FSM's book-keeping for one program: completion flags, unresolved deps of each
    fetched entry, the ready heap, and the window / fetch / issue counters."""

    __slots__ = ("entries", "window", "complete", "missing", "dependents", "ready",
                 "in_window", "fetch", "stopped", "outstanding", "completions", "retire")

    def __init__(self, entries: Sequence[ProgramEntry], window: int) -> None:
        n = len(entries)
        self.entries = entries
        self.window = window
        self.complete = bytearray(n)
        self.missing: dict[int, int] = {}            # unresolved deps of fetched entries
        # a program that streams its entries (cmdq.hw.StreamedProgram) is told when one has
        # completed, so that it can forget it; a list keeps them all
        self.retire = getattr(entries, "retire", None)
        self.dependents: dict[int, list[int]] = {}   # incomplete id → entries waiting on it
        self.ready: list[int] = []                   # heap of fetched, ready, unissued ids
        self.in_window = 0
        self.fetch = 0
        self.stopped = False
        self.outstanding = 0
        self.completions = 0

    def resolve(self, eid: int) -> None:
        """Entry `eid` completed: entries whose last dependency it was become ready."""
        self.complete[eid] = 1
        for w in self.dependents.pop(eid, ()):
            self.missing[w] -= 1
            if self.missing[w] == 0:
                del self.missing[w]
                heapq.heappush(self.ready, w)

    def done(self, e: ProgramEntry) -> None:
        """Entry `e` completed and its times are final: a streaming program may drop it."""
        if self.retire is not None:
            self.retire(e)

    def can_fetch(self) -> bool:
        """The window has room and the next entry is not a barrier."""
        return (not self.stopped and self.fetch < len(self.entries)
                and self.in_window < self.window
                and self.entries[self.fetch].kind != "barrier")


class _Fsm:
    """The Control FSM running one program, as a state machine (no SimPy process): fetch,
    then issue every ready entry one per issue latency (a delay event each), and when
    nothing is ready wait until a completion pokes it. Its waits are the events a process
    would have yielded, in the same order (components.channel's argument): the issue
    latency's delay, and a wake-up event scheduled by the first completion that finds it
    waiting, so that it resumes after the instant's other completions, as before."""

    __slots__ = ("cpu", "env", "run", "done", "issue_ns", "seen", "entry", "waiting")

    def __init__(self, cpu: MCpu, entries: Sequence[ProgramEntry], done: simpy.Event) -> None:
        self.cpu = cpu
        self.env = cpu.env
        self.run = _Run(entries, cpu.spec.issue_window)
        self.done = done
        self.issue_ns = cpu.spec.issue_latency_cycles / cpu.spec.clock_ghz
        self.seen = 0
        self.entry: ProgramEntry | None = None  # the entry whose issue latency runs
        self.waiting = False

    def start(self) -> None:
        """Begin at this instant, as a started process does (an urgent event)."""
        ev = Event(self.env)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(lambda _ev: self.cycle())
        self.env.schedule(ev, URGENT)

    def finish(self, e: ProgramEntry) -> None:
        """Entry `e` completed now: retire it and resume the FSM if it waits."""
        run = self.run
        run.completions += 1
        e.end_ns = self.env._now
        run.in_window -= 1
        run.outstanding -= 1
        run.resolve(e.id)
        run.done(e)
        if self.waiting:  # wake it after this instant's other events, as a process
            self.waiting = False
            call_after(self.env, 0, self._woken)

    def _woken(self, _ev: Event) -> None:
        self.cycle()

    def cycle(self) -> None:
        """Fetch and issue until an issue latency or a completion is waited for, or the
        program has ended."""
        run = self.run
        while True:
            self.seen = run.completions
            self.cpu._fetch(run)
            if not self.issue() or self.settle():
                return

    def issue(self) -> bool:
        """Issue ready entries, lowest id first; False while an issue latency runs."""
        run = self.run
        while run.ready:
            e = run.entries[heapq.heappop(run.ready)]
            if self.issue_ns:
                self.entry = e
                call_after(self.env, self.issue_ns, self._issued)
                return False
            self.issue_one(e)
        return True

    def _issued(self, _ev: Event) -> None:
        e, self.entry = self.entry, None
        self.issue_one(e)
        if self.issue() and not self.settle():
            self.cycle()

    def issue_one(self, e: ProgramEntry) -> None:
        cpu = self.cpu
        e.issue_ns = self.env._now
        cpu.issued += 1
        self.run.outstanding += 1
        if e.kind == "nop" or e.command is None:
            e.start_ns = self.env._now
            self.finish(e)
        else:
            cpu._send(e, self.finish)

    def settle(self) -> bool:
        """Nothing left to issue: True when the program has ended or the FSM now waits,
        False when a completion came in while issuing (fetch and issue again)."""
        run = self.run
        if run.outstanding == 0 and not run.ready and self.cpu._ended(run, self.done):
            return True
        if run.completions != self.seen or run.can_fetch():
            return False
        self.waiting = True
        return True


@register("m_cpu", "m_cpu_v1")
class MCpu(ComponentBase):
    PORTS = (Port("pe_cpus", "pe_cpu", many=True,
                  doc="every PE's PE_CPU, in global PE index order (the CMDQ `pe` field)"),)

    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self.issued = 0
        self._routes: dict[int, tuple] = {}

    def connect(self) -> None:
        self.pe_cpus = self.peers_of("pe_cpus")

    def run_program(self, entries: list[ProgramEntry]) -> simpy.Event:
        """Start executing `entries`; the returned event fires when the program has ended."""
        done = self.env.event()
        _Fsm(self, entries, done).start()
        return done

    def _fetch(self, run: _Run) -> None:
        """Fetch in order while the window has room; a ready BARRIER passes at once."""
        env = self.env
        entries = run.entries
        while not run.stopped and run.fetch < len(entries) and run.in_window < run.window:
            e = entries[run.fetch]
            if e.kind == "barrier":
                if not (all(run.complete[d] for d in e.wait_for)
                        and all(run.complete[d] for d in e.deps)):
                    break
                e.fetch_ns = e.issue_ns = e.start_ns = e.end_ns = env._now
                run.resolve(e.id)
                self.sim.tracer.event(env._now, "barrier_pass", self.id, e.label or f"#{e.id}")
                run.done(e)
                run.fetch += 1
                continue
            if e.kind == "end":
                e.fetch_ns = env._now
                run.stopped = True
                break
            e.fetch_ns = env._now
            missing = 0
            for d in e.deps:
                if not run.complete[d]:
                    missing += 1
                    run.dependents.setdefault(d, []).append(e.id)
            if missing:
                run.missing[e.id] = missing
            else:
                heapq.heappush(run.ready, e.id)
            run.in_window += 1
            run.fetch += 1

    def _ended(self, run: _Run, done: simpy.Event) -> bool:
        """With nothing outstanding: complete END (or a program without one) and fire
        `done`; False while END still waits on its deps or entries remain to fetch."""
        now = self.env._now
        if run.stopped:
            end = run.entries[run.fetch]
            if all(run.complete[d] for d in end.deps):
                end.issue_ns = end.start_ns = end.end_ns = now
                run.complete[end.id] = 1
                run.done(end)
                done.succeed(now)
                return True
        elif run.fetch >= len(run.entries):
            done.succeed(now)  # no END: validated programs always have one
            return True
        return False

    def _route(self, pe_index: int) -> tuple:
        """(PE, its PE_CPU, command route out, completion route back, the ledger's actions
        of each), built once per PE (`fabric.Route`: a fixed path for one packet size)."""
        r = self._routes.get(pe_index)
        if r is None:
            sim = self.sim
            pe = sim.topology.pe(pe_index)
            nbytes = self.spec.command_bytes
            out = Route(sim.command_path(self.node.cube, pe, to_pe=True), nbytes)
            back = Route(sim.command_path(self.node.cube, pe, to_pe=False), nbytes)
            r = self._routes[pe_index] = (
                pe, self.pe_cpus[pe.index], out, back,
                sim.actions.path_actions(out.stages), sim.actions.path_actions(back.stages))
        return r

    def _send(self, e: ProgramEntry, finish) -> None:  # noqa: ANN001
        """Send `e`'s command to its PE: the command route is reserved at this instant's
        grant (components.arbiter), the completion route at the grant of the instant the
        command completes."""
        env = self.env
        sim = self.sim
        count = sim.actions.count_path
        arbiter = sim.arbiter
        pe, pe_cpu, out, back_route, acts_out, acts_back = self._route(e.pe)
        nbytes = out.nbytes
        cmd = e.command
        meta = cmd.meta
        meta["entry"] = e
        meta["pe_id"] = pe.id
        seq = meta.get("seq", 0)

        def deliver(_ev) -> None:  # noqa: ANN001
            cmd.submit_ns = env._now
            pe_cpu.submit(cmd)

        def send() -> None:
            now = env._now
            arrive = out.reserve(now)
            count(cmd, acts_out, nbytes, now, arrive)
            call_after(env, arrive - now, deliver)

        def back() -> None:
            now = env._now
            end = back_route.reserve(now)
            count(cmd, acts_back, nbytes, now, end)
            call_after(env, end - now, lambda _e: finish(e))

        def completed(_ev) -> None:  # noqa: ANN001
            arbiter.request((seq, BACK_TILE, 0), back)

        cmd.done = Signal(completed)
        arbiter.request((seq, -1, 0), send)
