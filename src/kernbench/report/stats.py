"""stats.json: the machine-readable result of a simulation (schema in docs/stats.md).

Everything is keyed and sorted so that the same run gives byte-identical JSON. Times are
ns, rounded to 1e-3 ns; utilizations are busy / total in [0, 1], rounded to 1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernbench.components.base import PeEngineBase
from kernbench.report.energy import energy_report
from kernbench.topology.area import area_report

STATS_SCHEMA_VERSION = "1.0"


def round_ns(x: float) -> float:
    """Times in stats.json: ns rounded to 1e-3 ns."""
    return round(float(x), 3)


def _u(busy: float, total: float) -> float:
    return round(busy / total, 6) if total > 0 else 0.0


def collect_stats(sim: Any, total_ns: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the stats dict from a finished Simulator."""
    clock = sim.topology.config.cube.pe_template.pe_gemm.clock_ghz
    engines: dict[str, Any] = {}
    for cid in sorted(sim.components):
        comp = sim.components[cid]
        if not isinstance(comp, PeEngineBase):
            continue
        row: dict[str, Any] = {
            "kind": comp.KIND,
            "busy_ns": round_ns(comp.busy_ns),
            # a multi-channel engine (pe_dma: read + write) is fully used when all channels are
            "utilization": _u(comp.busy_ns, total_ns * len(comp.channel_busy_ns)),
            "ops": comp.ops,
        }
        if len(comp.channel_busy_ns) > 1:
            row["channels"] = {
                ch: {"busy_ns": round_ns(b), "utilization": _u(b, total_ns)}
                for ch, b in sorted(comp.channel_busy_ns.items())
            }
        row.update(comp.stats())
        engines[cid] = row
    links: dict[str, Any] = {}
    for lid in sorted(sim.servers):
        s = sim.servers[lid]
        if s.bytes:
            links[lid] = {"bytes": s.bytes, "busy_ns": round_ns(s.busy_ns),
                          "utilization": _u(s.busy_ns, total_ns)}
    memories: dict[str, Any] = {}
    for cid in sorted(sim.components):
        comp = sim.components[cid]
        if comp.KIND in ("hbm_ctrl", "shared_sram", "pe_tcm"):
            st = comp.stats()
            if comp.KIND == "hbm_ctrl":
                chans = st["channels"]
                for ch in chans.values():
                    ch["busy_ns"] = round_ns(ch["busy_ns"])
                    ch["utilization"] = _u(ch["busy_ns"], total_ns)
                busiest = max((c["busy_ns"] for c in chans.values()), default=0.0)
                st["utilization"] = _u(busiest, total_ns)
            else:
                st["utilization"] = _u(st["busy_ns"], total_ns)
                st["busy_ns"] = round_ns(st["busy_ns"])
            if st.get("bytes"):
                memories[cid] = st
    stats: dict[str, Any] = {
        "schema_version": STATS_SCHEMA_VERSION,
        "topology": sim.topology.name,
        "total_ns": round_ns(total_ns),
        "clock_ghz": clock,
        "total_cycles": round(total_ns * clock),
        "commands_completed": sim.completed,
        "engines": engines,
        "links": links,
        "memories": memories,
        "bottleneck": bottleneck(engines, links, memories),
        # priced from the action counts the engines recorded with their timing (ADR-0400)
        "energy": energy_report(sim.topology, sim.actions.totals, total_ns).to_json(),
        "area_mm2": area_report(sim.topology).to_json(),
    }
    if extra:
        stats.update(extra)
    return stats


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
    """Deterministic JSON (sorted keys), written atomically (no half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
