"""Run a CMDQ program on the hardware model and report (stats entries, critical path)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from kernbench.cmdq.hw import engine_of, limits_for, to_program
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.validate import check_program
from kernbench.common.program import ProgramEntry
from kernbench.errors import DeadlockError
from kernbench.report.energy import group_energy
from kernbench.report.perfetto import build_trace
from kernbench.report.stats import collect_stats, round_ns
from kernbench.sim_engine.engine import Simulator
from kernbench.topology.model import Topology


def no_phase(name: str, total: int | None = None, poll: Any = None) -> Any:
    """The phase hook that shows nothing."""
    return contextlib.nullcontext()


@dataclass
class CmdqRun:
    sim: Simulator
    program: CmdqProgram
    entries: list[ProgramEntry]
    total_ns: float

    def stats(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
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
        data = {"entries": rows, "critical_path": critical_path(self.entries)}
        if extra:
            data.update(extra)
        return collect_stats(self.sim, self.total_ns, data)

    def layer_energy(self, spans_ns: dict[str, float]) -> dict[str, dict[str, Any]]:
        """Energy of each layer in `spans_ns` (layer id → its ns): the dynamic energy of its
        entries' actions plus its time share of the static energy (report.energy.group_energy)."""
        groups: dict[str, list[int]] = {lid: [] for lid in spans_ns}
        for src, e in zip(self.program.cmdq, self.entries, strict=True):
            if src.layer_id in groups and e.command is not None:
                groups[src.layer_id].append(e.command.meta["seq"])
        return group_energy(self.sim.topology, self.sim.actions, groups, spans_ns,
                            self.total_ns)

    def trace(self) -> dict[str, Any]:
        return build_trace(self.sim, [e.command for e in self.entries if e.command is not None])


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
                     op_logger: Any = None, trace: bool = True, data: Any = None,
                     phase: Any = None, watch: Any = None) -> CmdqRun:
    """Validate `program` against `topology`, run it to the end, return the run.
    `phase(name, total, poll)`: a context manager around the run (progress display).
    `watch(entries, layer_ids)` (optional) starts an observer of the entries (a progress bar
    of commands and layers done) and returns the function that stops it; it only reads."""
    limits = limits_for(topology)
    check_program(program, limits, file)
    entries = to_program(program, topology, limits, data)
    sim = Simulator(topology, op_logger=op_logger, trace=trace)
    done = sim.run_program(entries)
    stop = (watch(entries, [getattr(src, "layer_id", None) for src in program.cmdq])
            if watch is not None else None)
    try:
        with (phase or no_phase)("simulate", len(entries),
                                 lambda: sum(e.end_ns is not None for e in entries)):
            total = sim.run()
    finally:
        if stop is not None:
            stop()
    if not done.triggered:

        raise DeadlockError(f"the program did not reach END: {sim.deadlock_report()}")
    return CmdqRun(sim, program, entries, total)
