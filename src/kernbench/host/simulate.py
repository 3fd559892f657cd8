"""Run a CMDQ program on the hardware model and report (stats entries, critical path).

A run that records nothing per entry (timing only, no trace) streams the program through
the Control FSM and keeps per-layer spans instead of entry rows (`LayerTally`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from kernbench.cmdq.hw import DataAttacher, StreamedProgram, engine_of, limits_for, to_program
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.stream import EntryStream
from kernbench.cmdq.validate import check_program
from kernbench.common.program import LayerSpan, LayerTally, ProgramEntry, add_span, round_ns
from kernbench.errors import DeadlockError
from kernbench.report.energy import group_energy
from kernbench.report.perfetto import build_trace, with_pipeline_track
from kernbench.report.stats import collect_stats
from kernbench.sim_engine.engine import Simulator
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology.model import Topology

#: `phase(name, total, poll)`: a context manager around a long phase (a progress display
#: polls `poll()` → units done of `total`)
PhaseHook = Callable[[str, int | None, Callable[[], int] | None], AbstractContextManager[Any]]


def no_phase(name: str, total: int | None = None,
             poll: Callable[[], int] | None = None) -> AbstractContextManager[None]:
    """The phase hook that shows nothing."""
    return contextlib.nullcontext()


@dataclass
class SimWatch:
    """What a progress display may poll while a program runs: `poll()` → (entries done,
    layers done) out of `entries` and `layers` (it only reads)."""

    entries: int
    layers: int
    poll: Callable[[], tuple[int, int]]


#: `watch(SimWatch)` starts an observer of a run and returns the function that stops it
WatchHook = Callable[[SimWatch], Callable[[], None] | None]


def tally_of(program: CmdqProgram) -> LayerTally:
    """The per-layer tally of `program` (common.program's `LayerTally`, compiled with the
    simulator's core: it runs once per entry): a streamed program says its layers'
    entries itself."""
    if isinstance(program.cmdq, EntryStream):
        return LayerTally(program.cmdq.layer_entries)
    left: dict[str, int] = {}
    for src in program.cmdq:
        lid = getattr(src, "layer_id", None)
        if lid:
            left[lid] = left.get(lid, 0) + 1
    return LayerTally(left)


@dataclass
class CmdqRun:
    """A finished run. With `tally` (no per-entry record was kept), `entries` is the
    streamed program (its entries forgotten) and the per-layer figures come from the tally."""

    sim: Simulator
    program: CmdqProgram
    entries: Sequence[ProgramEntry]
    total_ns: float
    tally: LayerTally | None = None

    def stats(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """stats.json: `entries` rows and `critical_path` when they were kept, else
        `entry_count` (docs/stats.md)."""
        if self.tally is not None:
            data: dict[str, Any] = {"entry_count": len(self.entries)}
        else:
            data = {"entries": self._rows(), "critical_path": critical_path(self.entries)}
        if extra:
            data.update(extra)
        return collect_stats(self.sim, self.total_ns, data)

    def _rows(self) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        topo = self.sim.topology
        for src, e in zip(self.program.cmdq, self.entries, strict=True):
            pe_id = topo.pe(e.pe).id if e.kind == "command" else None
            cmd = e.command
            start = cmd.start_ns if cmd is not None and cmd.start_ns is not None else e.start_ns
            rows[str(e.id)] = {
                "opcode": src.opcode,
                "layer_id": src.layer_id,
                "pe": pe_id,
                "engine": engine_of(src, pe_id) if pe_id else None,
                "issue_ns": round_ns(e.issue_ns) if e.issue_ns is not None else None,
                "start_ns": round_ns(start) if start is not None else None,
                "end_ns": round_ns(e.end_ns) if e.end_ns is not None else None,
            }
        return rows

    def layer_spans(self, stats: dict[str, Any]) -> dict[str, LayerSpan]:
        """Per-layer spans: from the tally, or from `stats`' entry rows."""
        if self.tally is not None:
            return self.tally.spans
        spans: dict[str, LayerSpan] = {}
        for e in stats["entries"].values():
            add_span(spans, e.get("layer_id"), e["opcode"], e.get("start_ns"), e.get("end_ns"),
                     e.get("pe"))
        return spans

    def _layer_groups(self, lids: Sequence[str]) -> dict[str, list[Any]]:
        """Layer id → the ledger keys of its commands (the layer itself in a tallied run)."""
        if self.tally is not None:  # the ledger counted per layer
            return {lid: [lid] for lid in lids}
        groups: dict[str, list[Any]] = {lid: [] for lid in lids}
        for src, e in zip(self.program.cmdq, self.entries, strict=True):
            if src.layer_id in groups and e.command is not None:
                groups[src.layer_id].append(e.command.meta["seq"])
        return groups

    def layer_energy(self, spans_ns: dict[str, float]) -> dict[str, dict[str, Any]]:
        """Energy of each layer in `spans_ns` (layer id → its ns): the dynamic energy of its
        entries' actions plus its time share of the static energy (report.energy.group_energy)."""
        return group_energy(self.sim.topology, self.sim.actions,
                            self._layer_groups(list(spans_ns)), spans_ns, self.total_ns)

    def layer_traffic(self, lids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Bytes each layer's commands moved at each memory level, from the action ledger
        (the counts energy is priced from): `hbm` (hbm_byte), `shared_sram` (sram_byte),
        `tcm` (tcm_read_byte + tcm_write_byte)."""
        out: dict[str, dict[str, int]] = {}
        for lid, keys in self._layer_groups(lids).items():
            acts = self.sim.actions.for_seqs(keys)
            out[lid] = {"hbm": int(acts.get("hbm_byte", 0)),
                        "shared_sram": int(acts.get("sram_byte", 0)),
                        "tcm": int(acts.get("tcm_read_byte", 0) + acts.get("tcm_write_byte", 0))}
        return out

    def layer_actions(self, lids: list[str]) -> dict[str, int]:
        """The summed action counts of the commands of layers `lids`."""
        if self.tally is not None:  # the ledger counted per layer
            return self.sim.actions.for_seqs(lids)
        want = set(lids)
        return self.sim.actions.for_seqs(
            e.command.meta["seq"] for src, e in zip(self.program.cmdq, self.entries, strict=True)
            if src.layer_id in want and e.command is not None)

    def trace(self, stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """trace.json; with `stats` of a pipeline run, also its stages' micro-batches."""
        if self.tally is not None:
            raise RuntimeError("trace(): this run kept no per-entry record (trace=False)")
        tr = build_trace(self.sim, [e.command for e in self.entries if e.command is not None])
        return with_pipeline_track(tr, stats or {})


def critical_path(entries: list[ProgramEntry]) -> list[int]:
    """Entry ids from the first to the last-ending entry along the latest-ending dependency."""
    by_id = {e.id: e for e in entries}
    last = max((e for e in entries if e.end_ns is not None and e.kind != "end"),
               key=lambda e: (e.end_ns, -e.id), default=None)
    path: list[int] = []
    barrier_before: dict[int, int] = {}
    cur_barrier = None
    for e in entries:
        if cur_barrier is not None:
            barrier_before[e.id] = cur_barrier
        if e.kind == "barrier":
            cur_barrier = e.id
    e = last
    while e is not None:
        path.append(e.id)
        preds = [by_id[d] for d in (*e.deps, *e.wait_for)]
        if e.id in barrier_before and not preds:
            preds = [by_id[barrier_before[e.id]]]
        preds = [p for p in preds if p.end_ns is not None]
        e = max(preds, key=lambda p: (p.end_ns, -p.id)) if preds else None
    return path[::-1]


def simulate_program(program: CmdqProgram, topology: Topology, *, file: str | None = None,
                     op_logger: OpLogger | None = None, trace: bool = True,
                     data: DataAttacher | None = None, phase: PhaseHook | None = None,
                     watch: WatchHook | None = None,
                     per_entry: bool = True, consume: bool = False,
                     check: bool = True) -> CmdqRun:
    """Validate `program` against `topology`, run it to the end, return the run.
    `phase(name, total, poll)`: a context manager around the run (progress display).
    `watch(SimWatch)` (optional) starts an observer of the run (a progress bar of commands
    and layers done) and returns the function that stops it; it only reads.

    `per_entry` False (timing only: no `trace`, `op_logger` or `data`): entries are built as
    the Control FSM fetches them and folded into per-layer spans when they complete, so
    host memory follows the issue window and the layers, not the commands; `consume` also
    drops each CMDQ entry of `program` once lowered (the caller gives the program up).

    `check` False skips the validation against the topology's limits for a program this
    process compiled a moment ago (its entries came through the compiler's invariant
    checks and the CMDQ models; a file or a foreign program is always checked)."""
    limits = limits_for(topology)
    streamed = isinstance(program.cmdq, EntryStream)  # checked entry by entry as it comes
    if check and not streamed:
        check_program(program, limits, file)
    compact = not (per_entry or trace or op_logger is not None or data is not None)
    if streamed and not compact:
        raise RuntimeError("simulate_program: a streamed program runs without per-entry "
                           "records only")
    tally = None
    if compact:
        tally = tally_of(program)
        entries: Sequence[ProgramEntry] = StreamedProgram(program, topology, limits, tally,
                                                          consume=consume)
        progress = SimWatch(len(entries), tally.layers, lambda: (tally.done, tally.layers_done))
    else:
        entries = to_program(program, topology, limits, data)
        progress = _list_watch(entries, [getattr(s, "layer_id", None) for s in program.cmdq])
    sim = Simulator(topology, op_logger=op_logger, trace=trace, per_command=not compact)
    done = sim.run_program(entries)
    stop = watch(progress) if watch is not None else None
    try:
        with (phase or no_phase)("simulate", len(entries), lambda: progress.poll()[0]):
            total = sim.run()
    finally:
        if stop is not None:
            stop()
    if not done.triggered:

        raise DeadlockError(f"the program did not reach END: {sim.deadlock_report()}")
    return CmdqRun(sim, program, entries, total, tally)


def _list_watch(entries: list[ProgramEntry], layer_of: list[str | None]) -> SimWatch:
    """Progress of a program kept as a list: entries with an end time, layers all done."""
    left0: dict[str, int] = {}
    for lid in layer_of:
        if lid:
            left0[lid] = left0.get(lid, 0) + 1

    def poll() -> tuple[int, int]:
        left = dict(left0)
        n = 0
        for e, lid in zip(entries, layer_of, strict=True):
            if e.end_ns is not None:
                n += 1
                if lid:
                    left[lid] -= 1
        return n, sum(1 for v in left.values() if v == 0)

    return SimWatch(len(entries), len(left0), poll)
