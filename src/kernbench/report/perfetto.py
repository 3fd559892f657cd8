"""Chrome / Perfetto trace JSON from a Tracer (open in ui.perfetto.dev or chrome://tracing).

One process per PE (and one per cube for M_CPU), one thread per engine channel
(`pe_gemm.main`, `pe_dma.read`, ...). Engine services are complete ("X") events whose
args keep the cycles; a channel serves one token at a time, so its events never overlap
and nest trivially. Command lifetimes go on `commands[k]` threads, k chosen by a greedy
interval colouring so that no two overlap on one thread. The other trace events
(command_submitted, sub_command_dispatched, tile_ready, command_complete) and M_CPU's
barrier_pass are instant ("i") events on an `events` thread. ts and dur are in µs. A `power`
process carries counter ("C") tracks of the average power per time bin (mW), in total and
by component kind, priced from the same action counts as stats.json's `energy`.
"""

from __future__ import annotations

from typing import Any

from kernbench.common.pe_commands import PeCommand
from kernbench.common.tile_plan import StageType
from kernbench.report.energy import power_counter_events
from kernbench.sim_engine.engine import Simulator

#: the trace events exported as instant ("i") events on their PE's `events` thread;
#: engine_start / engine_complete are the X events' two ends
_INSTANT = frozenset({"command_submitted", "sub_command_dispatched", "tile_ready",
                      "command_complete", "barrier_pass"})


def build_trace(sim: Simulator, commands: list[PeCommand] | None = None) -> dict[str, Any]:
    topo = sim.topology
    clock = topo.config.cube.pe_template.pe_gemm.clock_ghz
    pid_of: dict[str, int] = {}
    meta: list[dict[str, Any]] = []
    for p in topo.pes:
        pid_of[p.id] = p.index + 1
        meta.append({"ph": "M", "name": "process_name", "pid": p.index + 1, "tid": 0,
                     "args": {"name": p.id}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": p.index + 1, "tid": 0,
                     "args": {"sort_index": p.index + 1}})
    base = len(topo.pes) + 1
    for c in topo.cubes:
        pid_of[c.id] = base + c.index
        meta.append({"ph": "M", "name": "process_name", "pid": base + c.index, "tid": 0,
                     "args": {"name": f"{c.id} (M_CPU)"}})
    tids: dict[tuple[int, str], int] = {}

    def tid(pid: int, name: str) -> int:
        key = (pid, name)
        t = tids.get(key)
        if t is None:
            t = len([k for k in tids if k[0] == pid]) + 1
            tids[key] = t
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
                         "args": {"name": name}})
        return t

    events: list[dict[str, Any]] = []
    # canonical order: by time, then by name, never by the order in which the
    # simulator happened to run the same-instant events that recorded them
    for comp, ch, s, e, label, tile, stage in sorted(sim.tracer.spans, key=_span_order):
        pe_id, _, short = comp.rpartition(".")
        pid = pid_of.get(pe_id, 0)
        events.append({
            "ph": "X", "name": label or short, "cat": StageType(stage).name,
            "pid": pid, "tid": tid(pid, f"{short}.{ch}"),
            "ts": round(s / 1000.0, 6), "dur": round((e - s) / 1000.0, 6),
            "args": {"tile": tile, "cycles": round((e - s) * clock), "start_ns": s, "end_ns": e},
        })
    if commands:
        lanes: dict[int, list[float]] = {}
        for cmd in commands:
            if cmd.start_ns is None or cmd.end_ns is None or cmd.submit_ns is None:
                continue
            pe = cmd.meta.get("pe_id")
            pid = pid_of.get(pe, 0)
            free = lanes.setdefault(pid, [])
            k = next((i for i, f in enumerate(free) if f <= cmd.submit_ns), None)
            if k is None:
                free.append(cmd.end_ns)
                k = len(free) - 1
            else:
                free[k] = cmd.end_ns
            events.append({
                "ph": "X", "name": cmd.label, "cat": "command", "pid": pid,
                "tid": tid(pid, f"commands[{k}]"),
                "ts": round(cmd.submit_ns / 1000.0, 6),
                "dur": round((cmd.end_ns - cmd.submit_ns) / 1000.0, 6),
                "args": {"start_ns": cmd.start_ns, "end_ns": cmd.end_ns,
                         "cycles": round((cmd.end_ns - cmd.submit_ns) * clock)},
            })
    for t, name, comp, label, tile in sorted(sim.tracer.events):
        if name in _INSTANT:
            pe_id = comp.rsplit(".", 1)[0]
            pid = pid_of.get(pe_id, pid_of.get(comp.rsplit(".", 1)[0], 0))
            events.append({"ph": "i", "s": "t", "name": name, "pid": pid,
                           "tid": tid(pid, "events"), "ts": round(t / 1000.0, 6),
                           "args": {"label": label, "tile": tile}})
    if sim.actions.record_events:
        pid = base + len(topo.cubes)
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                     "args": {"name": "power"}})
        events += power_counter_events(topo, sorted(sim.actions.events), sim.env.now,
                                       pid)
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"topology": topo.name, "clock_ghz": clock}}


def _span_order(span: tuple) -> tuple:
    """(start, end, component, channel, label, tile, stage) of a tracer span."""
    comp, ch, s, e, label, tile, stage = span
    return s, e, comp, ch, label, tile, stage


def with_pipeline_track(trace: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """`trace` (a `build_trace` result) with, when `stats` has `parallel.stage_times` (a
    pipeline run: stage, micro_batch, start_ns, end_ns rows), a `pipeline` process: one
    thread per stage (`stage s`), one complete event `mb m` per (stage, micro-batch). A
    stage's idle time before its first and after its last micro-batch (the bubble) and
    the stages' overlap show on one track beside the PEs' commands."""
    stage_times = (stats.get("parallel") or {}).get("stage_times")
    if not stage_times:
        return trace
    events = trace["traceEvents"]
    pid = 1 + max((e.get("pid", 0) for e in events), default=0)
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
             "args": {"name": "pipeline"}}]
    for s in sorted({r["stage"] for r in stage_times}):
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": s + 1,
                     "args": {"name": f"stage {s}"}})
    spans = [{"ph": "X", "name": f"mb{r['micro_batch']}", "cat": "pipeline", "pid": pid,
              "tid": r["stage"] + 1, "ts": round(r["start_ns"] / 1000.0, 6),
              "dur": round((r["end_ns"] - r["start_ns"]) / 1000.0, 6),
              "args": {"stage": r["stage"], "micro_batch": r["micro_batch"],
                       "start_ns": r["start_ns"], "end_ns": r["end_ns"]}}
             for r in sorted(stage_times, key=lambda r: (r["stage"], r["micro_batch"]))]
    trace["traceEvents"] = [*meta, *events, *spans]
    return trace
