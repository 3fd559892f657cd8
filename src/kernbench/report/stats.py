"""stats.json: the machine-readable result of a simulation (schema in docs/stats.md).

Everything is keyed and sorted so that the same run gives byte-identical JSON. Times are
ns, rounded to 1e-3 ns; utilizations are busy / total in [0, 1], rounded to 1e-6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from kernbench.components.counters import EngineCounters, HardwareCounters, MemoryCounters
from kernbench.report.energy import energy_report
from kernbench.report.json_text import dump_indented
from kernbench.topology.area import area_report

STATS_SCHEMA_VERSION = "1.0"


def round_ns(x: float) -> float:
    """Times in stats.json: ns rounded to 1e-3 ns."""
    return round(float(x), 3)


def _u(busy: float, total: float) -> float:
    return round(busy / total, 6) if total > 0 else 0.0


class CounterSource(Protocol):
    """Anything that can snapshot a finished run's counters (the Simulator)."""

    def counters(self) -> HardwareCounters:
        """The typed counters of the run."""
        ...


def collect_stats(sim: CounterSource, total_ns: float,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the stats dict from a finished Simulator's counters (`sim.counters()`)."""
    hw = sim.counters()
    clock = hw.clock_ghz
    engines = {e.id: _engine_row(e, total_ns) for e in hw.engines}
    links = {s.id: {"bytes": s.bytes, "busy_ns": round_ns(s.busy_ns),
                    "utilization": _u(s.busy_ns, total_ns)} for s in hw.links if s.bytes}
    memories: dict[str, Any] = {}
    for m in hw.memories:
        st = _memory_row(m, total_ns)
        if st.get("bytes"):
            memories[m.id] = st
    stats: dict[str, Any] = {
        "schema_version": STATS_SCHEMA_VERSION,
        "topology": hw.topology,
        "total_ns": round_ns(total_ns),
        "clock_ghz": clock,
        "total_cycles": round(total_ns * clock),
        "commands_completed": hw.commands_completed,
        "engines": engines,
        "links": links,
        "memories": memories,
        "bottleneck": bottleneck(engines, links, memories),
        # priced from the action counts the engines recorded with their timing
        "energy": energy_report(sim.topology, sim.actions.totals, total_ns).to_json(),
        "area_mm2": area_report(sim.topology).to_json(),
    }
    if extra:
        stats.update(extra)
    return stats


def _engine_row(e: EngineCounters, total_ns: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": e.kind,
        "busy_ns": round_ns(e.busy_ns),
        # a multi-channel engine (pe_dma: read + write) is fully used when all channels are
        "utilization": _u(e.busy_ns, total_ns * len(e.channel_busy_ns)),
        "ops": e.ops,
    }
    if len(e.channel_busy_ns) > 1:
        row["channels"] = {
            ch: {"busy_ns": round_ns(b), "utilization": _u(b, total_ns)}
            for ch, b in sorted(e.channel_busy_ns.items())
        }
    row.update(e.extra)
    return row


def _memory_row(m: MemoryCounters, total_ns: float) -> dict[str, Any]:
    """An interleaved memory is as utilized as its busiest channel (from rounded busy times)."""
    if m.channels:
        chans = {}
        for ch in m.channels:
            busy = round_ns(ch.busy_ns)
            chans[ch.id] = {"bytes": ch.bytes, "busy_ns": busy, "utilization": _u(busy, total_ns)}
        busiest = max((c["busy_ns"] for c in chans.values()), default=0.0)
        return {"bytes": m.bytes, "channels": chans, "utilization": _u(busiest, total_ns)}
    busy = m.busy_ns or 0.0
    return {"bytes": m.bytes, "busy_ns": round_ns(busy), "utilization": _u(busy, total_ns)}


def bottleneck(engines: dict, links: dict, memories: dict) -> dict[str, Any]:
    """The most utilized resource (engine channel, link or memory), ties by name."""
    cands: list[tuple[float, str, str]] = []
    for cid, e in engines.items():
        chans = e.get("channels")
        if chans:
            for ch, c in chans.items():
                cands.append((c["utilization"], f"{cid}.{ch}", e["kind"]))
        else:
            cands.append((e["utilization"], cid, e["kind"]))
    for lid, link in links.items():
        cands.append((link["utilization"], lid, "link"))
    for mid, m in memories.items():
        cands.append((m["utilization"], mid, mid.rsplit(".", 1)[-1]))
    if not cands:
        return {"component": None, "kind": None, "utilization": 0.0}
    u, name, kind = max(cands, key=lambda c: (c[0], c[1]))
    return {"component": name, "kind": kind, "utilization": u}


def write_json(obj: Any, path: Path) -> None:
    """Deterministic JSON (sorted keys, indent 1), written atomically (no half-written
    file). The text is streamed to the file in blocks (report.json_text), never held whole:
    a real-size program's cmdq.json would otherwise be one huge string."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        dump_indented(obj, f)  # json.dump(obj, f, indent=1, sort_keys=True), faster
        f.write("\n")
    tmp.replace(path)
