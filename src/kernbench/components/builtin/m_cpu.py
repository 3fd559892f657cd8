"""M_CPU: the cube's command processor, running the CMDQ Control FSM (spec §3.2, §13).

Fetch is in order. A fetched entry takes a slot of the issue window until it completes;
among fetched entries, any whose `deps` have all completed is issued (lowest id first),
one per `issue_latency_cycles`. A command travels over the mesh to its PE's PE_CPU
(`command_bytes` over the fabric), and its completion travels back the same way before
the FSM counts it as complete. BARRIER stops fetching until its `wait_for` (and deps)
have completed; NOP completes when issued; END stops fetching, and the program is done
when every issued entry has completed.

A program whose commands go to PEs of several chips is run by every chip's M_CPU at once
(`Simulator.run_program`): each fetches, in program order and through its own window, the
entries of its chip's PEs (pe-less BARRIER / NOP: the first chip's) and issues them one per
`issue_latency_cycles`. They share one `Board` of completion flags, so an entry waiting on
another chip's entry becomes ready when that one completes (the cross-chip signal itself
is not modelled here; collectives model theirs as DMAs). The program ends (END) when every
chip's FSM has fetched and completed all its entries.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import simpy
from simpy.events import URGENT

from kernbench.common.pe_commands import PeCommand
from kernbench.components.arbiter import BACK_TILE, call_after
from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.fabric import Route, mypyc_attr
from kernbench.components.ports import Port
from kernbench.components.signals import Signal

if TYPE_CHECKING:
    from kernbench.common.program import ProgramEntry


class Board:
    """Completion state one program's FSMs share: completion flags, the unresolved deps of
    each fetched entry and who waits on whom. `owner`: for a program split over chips,
    each entry's FSM (an index into `runs`); None: one FSM runs everything."""

    __slots__ = ("complete", "missing", "dependents", "retire", "owner", "runs", "held")

    def __init__(self, entries: Sequence[ProgramEntry], owner: bytes | None = None) -> None:
        self.complete = bytearray(len(entries))
        self.missing: dict[int, int] = {}            # unresolved deps of fetched entries
        self.dependents: dict[int, list[int]] = {}   # incomplete id → entries waiting on it
        # a program that streams its entries (cmdq.hw.StreamedProgram) is told when one has
        # completed, so that it can forget it; a list keeps them all
        self.retire = getattr(entries, "retire", None)
        self.owner = owner
        self.runs: dict[int, _Run] = {}              # chip (`owner` value) → its FSM
        self.held: list[_Run] = []                   # FSMs stopped at a BARRIER

    def resolve(self, eid: int, run: _Run) -> None:
        """Entry `eid` completed (on `run`'s FSM): entries whose last dependency it was
        become ready on their FSM, which is woken when it is another one."""
        self.complete[eid] = 1
        for w in self.dependents.pop(eid, ()):
            self.missing[w] -= 1
            if self.missing[w] == 0:
                del self.missing[w]
                if self.owner is None:
                    heapq.heappush(run.ready, w)
                    continue
                other = self.runs[self.owner[w]]
                heapq.heappush(other.ready, w)
                if other is not run:
                    other.poke()
        for other in self.held:  # a BARRIER may wait on another chip's entries
            if other is not run:
                other.poke()

    def done(self, e: ProgramEntry) -> None:
        """Entry `e` completed and its times are final: a streaming program may drop it."""
        if self.retire is not None:
            self.retire(e)


class _Run:
    """One FSM's book-keeping for one program: its entries (`order`: their ids, in program
    order; None: all of them), the ready heap, and the window / fetch / issue counters.
    `split`: one of several chips' FSMs (it ends when its entries have all completed; END
    is the Simulator's)."""

    __slots__ = ("entries", "order", "n", "window", "board", "ready", "in_window", "fetch",
                 "stopped", "outstanding", "completions", "poke", "split")

    def __init__(self, entries: Sequence[ProgramEntry], window: int, board: Board,
                 order: Sequence[int] | None = None) -> None:
        self.entries = entries
        self.order = order
        self.n = len(entries) if order is None else len(order)
        self.window = window
        self.board = board
        self.ready: list[int] = []                   # heap of fetched, ready, unissued ids
        self.in_window = 0
        self.fetch = 0
        self.stopped = False
        self.outstanding = 0
        self.completions = 0
        self.poke = _no_poke
        self.split = order is not None
        owner = board.owner
        board.runs[owner[order[0]] if owner is not None and order else 0] = self

    def next_entry(self) -> ProgramEntry:
        """The entry to fetch next (`fetch` < `n`)."""
        order = self.order
        return self.entries[self.fetch if order is None else order[self.fetch]]

    def can_fetch(self) -> bool:
        """The window has room and the next entry is not a barrier."""
        return (not self.stopped and self.fetch < self.n
                and self.in_window < self.window
                and self.next_entry().kind != "barrier")


def _no_poke() -> None:
    return None


class _Fsm:
    """One program's Control FSM on one M_CPU: the loop a SimPy process of it would run
    (fetch, issue the ready entries one per issue latency, wait for a completion), as a
    state machine resumed by the events that process would wait on: the urgent start
    event, each issue latency (`call_after`) and the wake-up event (`MCpu._wake`), created
    and triggered when the process would create and trigger them. It resumes in the
    callback of an event, never inside the completion that wakes it: the completions of
    one instant are all seen before it picks the lowest ready entry."""

    __slots__ = ("mcpu", "entries", "done", "board", "order", "run", "issue_ns", "seen")

    def __init__(self, mcpu: MCpu, entries: Sequence[ProgramEntry], done: simpy.Event,
                 board: Board | None, order: Sequence[int] | None) -> None:
        self.mcpu = mcpu
        self.entries = entries
        self.done = done
        self.board = board
        self.order = order
        self.seen = 0

    def start(self, _ev: object) -> None:
        mcpu = self.mcpu
        spec = mcpu.spec
        board = self.board if self.board is not None else Board(self.entries)
        self.board = board
        self.run = _Run(self.entries, spec.issue_window, board, self.order)
        self.run.poke = mcpu._poke
        self.issue_ns = spec.issue_latency_cycles / spec.clock_ghz
        self._go(None)

    def finish(self, e: ProgramEntry) -> None:
        """`e`'s completion packet has arrived."""
        run = self.run
        run.completions += 1
        e.end_ns = self.mcpu.env._now
        run.in_window -= 1
        run.outstanding -= 1
        board = self.board
        board.resolve(e.id, run)
        if board.retire is not None:  # board.done(e)
            board.retire(e)
        w = self.mcpu._wake  # MCpu._poke
        if w is not None and not w.triggered:
            w.succeed()

    def _go(self, issued: ProgramEntry | None) -> None:
        """Run the loop until it waits: from its top (`issued` None), or inside the issue
        loop once `issued`'s issue latency has passed."""
        mcpu, run = self.mcpu, self.run
        env = mcpu.env
        while True:
            if issued is None:
                self.seen = run.completions
                mcpu._fetch(run)
            else:
                self._issue(issued)
                issued = None
            while run.ready:  # lowest id first, one per issue latency
                e = run.entries[heapq.heappop(run.ready)]
                if self.issue_ns:
                    call_after(env, self.issue_ns, self._issuer(e))
                    return
                self._issue(e)
            if run.outstanding == 0 and not run.ready and mcpu._ended(run, self.done):
                return
            if run.completions != self.seen or run.can_fetch():
                continue  # something completed while issuing: fetch and issue again
            wake = mcpu._wake = env.event()
            wake.callbacks.append(self._woken)
            return

    def _issuer(self, e: ProgramEntry) -> Callable[[object], None]:
        """The callback that issues `e` once its issue latency has passed."""
        return lambda _ev: self._go(e)

    def _woken(self, _ev: object) -> None:
        self.mcpu._wake = None
        self._go(None)

    def _issue(self, e: ProgramEntry) -> None:
        mcpu, run = self.mcpu, self.run
        e.issue_ns = mcpu.env._now
        mcpu.issued += 1
        run.outstanding += 1
        if e.kind == "nop" or e.command is None:
            e.start_ns = e.issue_ns
            self.finish(e)
        else:
            mcpu._send(e, self.finish)


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class MCpu(ComponentBase):
    PORTS = (Port("pe_cpus", "pe_cpu", many=True,
                  doc="every PE's PE_CPU, in global PE index order (the CMDQ `pe` field)"),)

    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self._wake: simpy.Event | None = None
        self.issued = 0
        self._routes: dict[int, tuple] = {}

    def connect(self) -> None:
        self.pe_cpus = self.peers_of("pe_cpus")

    def run_program(self, entries: Sequence[ProgramEntry], board: Board | None = None,
                    order: Sequence[int] | None = None) -> simpy.Event:
        """Start executing `entries`; the returned event fires when the program has ended.
        With `board` and `order` (a program split over chips, module docstring): run the
        entries `order` lists, sharing `board`; the event fires when they have all
        completed."""
        env = self.env
        done = env.event()
        fsm = _Fsm(self, entries, done, board, order)
        start = env.event()  # SimPy's process start: an urgent event at this instant
        start._ok = True
        start._value = None
        start.callbacks.append(fsm.start)
        env.schedule(start, URGENT)
        return done

    def board(self, entries: Sequence[ProgramEntry], owner: bytes) -> Board:
        """The completion board the chips' FSMs of a split program share (`owner`: each
        entry's chip, the index of its FSM)."""
        return Board(entries, owner)

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.triggered:
            w.succeed()

    def _fetch(self, run: _Run) -> None:
        """Fetch in order while the window has room; a ready BARRIER passes at once."""
        env = self.env
        board = run.board
        complete = board.complete
        entries, order = run.entries, run.order
        while not run.stopped and run.fetch < run.n and run.in_window < run.window:
            e = entries[run.fetch if order is None else order[run.fetch]]  # run.next_entry()
            if e.kind == "barrier":
                if not (all(complete[d] for d in e.wait_for)
                        and all(complete[d] for d in e.deps)):
                    if run.split and run not in board.held:
                        board.held.append(run)
                    break
                if run in board.held:
                    board.held.remove(run)
                e.fetch_ns = e.issue_ns = e.start_ns = e.end_ns = env._now
                board.resolve(e.id, run)
                self.sim.tracer.event(env._now, "barrier_pass", self.id, e.label or f"#{e.id}")
                board.done(e)
                run.fetch += 1
                continue
            if e.kind == "end":
                e.fetch_ns = env._now
                run.stopped = True
                break
            e.fetch_ns = env._now
            missing = 0
            for d in e.deps:
                if not complete[d]:
                    missing += 1
                    board.dependents.setdefault(d, []).append(e.id)
            if missing:
                board.missing[e.id] = missing
            else:
                heapq.heappush(run.ready, e.id)
            run.in_window += 1
            run.fetch += 1

    def _ended(self, run: _Run, done: simpy.Event) -> bool:
        """With nothing outstanding: complete END (or a program without one) and fire
        `done`; False while END still waits on its deps or entries remain to fetch. One of
        several chips' FSMs ends when all its entries have completed."""
        now = self.env._now
        board = run.board
        if run.split:
            if run.fetch >= run.n and run.in_window == 0:
                done.succeed(now)
                return True
            return False
        if run.stopped:
            end = run.entries[run.fetch]
            if all(board.complete[d] for d in end.deps):
                end.issue_ns = end.start_ns = end.end_ns = now
                board.complete[end.id] = 1
                board.done(end)
                done.succeed(now)
                return True
        elif run.fetch >= run.n:
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

    def _send(self, e: ProgramEntry, finish: Callable[[ProgramEntry], None]) -> None:
        """Send `e`'s command to its PE: the command route is reserved at this instant's
        grant (components.arbiter), the completion route at the grant of the instant the
        command completes."""
        cmd = e.command
        assert cmd is not None  # _issue sends commands only
        route = self._route(e.pe)
        meta = cmd.meta
        meta["entry"] = e
        meta["pe_id"] = route[0].id
        trip = _Trip(self, e, cmd, route, meta.get("seq", 0), finish)
        cmd.done = Signal(trip.completed)
        self.sim.arbiter.request((trip.seq, -1, 0), trip.send)


class _Trip:
    """One command's packets: out to its PE, and its completion back to M_CPU.

    An object, not closures: compiled, nested functions share one environment that holds
    them, a reference cycle per command that only the (paused) collector would free."""

    __slots__ = ("mcpu", "e", "cmd", "route", "seq", "finish")

    def __init__(self, mcpu: MCpu, e: ProgramEntry, cmd: PeCommand, route: tuple, seq: int,
                 finish: Callable[[ProgramEntry], None]) -> None:
        self.mcpu = mcpu
        self.e = e
        self.cmd = cmd
        self.route = route  # (PE, its PE_CPU, route out, route back, their ledger actions)
        self.seq = seq
        self.finish = finish

    def send(self) -> None:
        """The command packet's route is reserved now (this instant's grant)."""
        env = self.mcpu.env
        now = env._now
        out = self.route[2]
        arrive = out.reserve(now)
        self.mcpu.sim.actions.count_path(self.cmd, self.route[4], out.nbytes, now, arrive)
        call_after(env, arrive - now, self.deliver)

    def deliver(self, _ev: object) -> None:
        cmd = self.cmd
        cmd.submit_ns = self.mcpu.env._now
        self.route[1].submit(cmd)

    def completed(self, _ev: object) -> None:
        """The command has completed on its PE: its completion packet asks for its route."""
        self.mcpu.sim.arbiter.request((self.seq, BACK_TILE, 0), self.back)

    def back(self) -> None:
        env = self.mcpu.env
        now = env._now
        back = self.route[3]
        end = back.reserve(now)
        self.mcpu.sim.actions.count_path(self.cmd, self.route[5], self.route[2].nbytes, now,
                                         end)
        call_after(env, end - now, self.arrived)

    def arrived(self, _ev: object) -> None:
        self.finish(self.e)


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("m_cpu", "m_cpu_v1")(MCpu)
