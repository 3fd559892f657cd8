"""stats.json: the machine-readable result of a simulation (schema in docs/stats.md).

This module owns the document: it alone writes keys into it. `collect_stats` builds it from
a finished run's counters; the flows that learn more (per-layer rooflines, the cost model's
estimate, a replay, the LLM figures, the precision) hand their typed results to the
`set_*` functions here, which also hold the one definition of every figure derived from
them (the whole-model roofline fraction, the model's bound). `TOP_KEYS` is the list of
top-level keys that docs/stats.md documents (a test keeps the two equal).

Everything is keyed and sorted so that the same run gives byte-identical JSON. Times are
ns, rounded to 1e-3 ns; utilizations are busy / total in [0, 1], rounded to 1e-6.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kernbench.common.program import round_ns  # times in stats.json: ns to 1e-3 ns
from kernbench.components.counters import EngineCounters, HardwareCounters, MemoryCounters
from kernbench.report.energy import energy_report
from kernbench.report.json_text import dump_indented
from kernbench.report.verdict import bound_class
from kernbench.topology.area import area_report

STATS_SCHEMA_VERSION = "1.1"

#: every top-level key of stats.json (docs/stats.md has one row for each)
TOP_KEYS = ("schema_version", "topology", "total_ns", "clock_ghz", "total_cycles",
            "commands_completed", "engines", "links", "memories", "bottleneck", "entries",
            "critical_path", "entry_count", "layers", "roofline_fraction", "model_bound",
            "estimate_ns", "pe_choice", "kernel", "verify", "energy", "area_mm2", "llm",
            "replay", "generation", "moe", "parallel", "precision")

#: a stats document (the JSON object stats.json holds)
Stats = dict[str, Any]




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


@dataclass(frozen=True)
class LayerEstimateFigures:
    """The cost model's figures of one layer (compiler.cost.LayerEstimate, rounded here)."""

    estimate_ns: float
    busy_ns: float
    bound_by: str


@dataclass(frozen=True)
class ModelBounds:
    """Σ over a model's layers of their roofline bounds (a replayed run adds the replayed
    blocks' share)."""

    bound_ns: float
    compute_bound_ns: float
    memory_bound_ns: float
    #: the time they are compared with, unrounded (default: the document's `total_ns`)
    total_ns: float | None = None


def set_layers(stats: Stats, layers: dict[str, dict[str, Any]]) -> None:
    """The per-layer rows (compiler.roofline.layer_report) and the whole-model figures
    they define (`set_model_bounds`)."""
    stats["layers"] = layers
    set_model_bounds(stats, ModelBounds(
        bound_ns=sum(v["bound_ns"] for v in layers.values()),
        compute_bound_ns=sum(v["compute_bound_ns"] for v in layers.values()),
        memory_bound_ns=sum(v["memory_bound_ns"] for v in layers.values())))


def set_model_bounds(stats: Stats, b: ModelBounds) -> None:
    """`roofline_fraction` = Σ layer bound_ns / total_ns, and `model_bound` (the Σ of each
    bound and the larger of the two): their one definition (docs/stats.md)."""
    total = stats["total_ns"] if b.total_ns is None else b.total_ns
    stats["roofline_fraction"] = round(b.bound_ns / total, 6) if total else 0.0
    comp = round(b.compute_bound_ns, 3)
    mem = round(b.memory_bound_ns, 3)
    stats["model_bound"] = {"compute_bound_ns": comp, "memory_bound_ns": mem,
                            "bound_by": "compute" if comp >= mem else "memory"}


def set_estimate(stats: Stats, estimate_ns: float,
                 layers: Mapping[str, LayerEstimateFigures]) -> None:
    """The cost model's end-to-end `estimate_ns` and, per layer row present, its
    `estimate_ns`, `estimate_busy_ns` and `estimate_by`."""
    stats["estimate_ns"] = round(estimate_ns, 3)
    for lid, row in stats.get("layers", {}).items():
        le = layers.get(lid)
        if le is not None:
            row["estimate_ns"] = round(le.estimate_ns, 3)
            row["estimate_busy_ns"] = round(le.busy_ns, 3)
            row["estimate_by"] = le.bound_by


def set_layer_figures(stats: Stats, energy: Mapping[str, Mapping[str, Any]],
                      traffic: Mapping[str, Mapping[str, int]]) -> None:
    """Each layer's energy figures (report.energy.group_energy) and `traffic_bytes` (bytes
    by memory level, from the action ledger) into its row."""
    layers = stats["layers"]
    for lid, row in energy.items():
        layers[lid].update(row, traffic_bytes=traffic[lid])


def set_token_energy(stats: Stats, tokens: int) -> None:
    """The tokens one run processes and the energy per token (language models)."""
    if tokens > 0 and "energy" in stats:
        stats["energy"]["tokens"] = tokens
        stats["energy"]["per_token_pj"] = round(stats["energy"]["total_pj"] / tokens, 3)


def set_whole_time(stats: Stats, total_ns: float) -> None:
    """The whole model's time (a replayed run): `total_ns` and `total_cycles`."""
    stats["total_ns"] = round(total_ns, 3)
    stats["total_cycles"] = int(round(total_ns * stats["clock_ghz"]))


def set_commands_completed(stats: Stats, n: int) -> None:
    stats["commands_completed"] = int(n)


def set_energy(stats: Stats, energy: dict[str, Any]) -> None:
    """The `energy` section (report.energy.EnergyReport.to_json(), plus tokens)."""
    stats["energy"] = energy


def set_estimate_total(stats: Stats, estimate_ns: float) -> None:
    stats["estimate_ns"] = round(estimate_ns, 3)


@dataclass(frozen=True)
class Precision:
    """The widths a run used: for each operand class (`weight`, `activation`, `kv`) how many
    layers run at each width (int8, int4, fp16, fp32, ...), the layers whose width differs
    from their class's most common one, and where the widths came from (`qconfig`: a
    QConfig file, or a QConfig other than the defaults; `model`: the widths a quantized
    model carries; `defaults`: W8A8 KV8, docs/quantization.md) with the QConfig file's
    name when there is one (`qconfig_file`, written only then)."""

    source: str
    weight: dict[str, int]
    activation: dict[str, int]
    kv: dict[str, int]
    minority_layers: dict[str, dict[str, str]]
    qconfig_file: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.qconfig_file is not None:
            out["qconfig_file"] = self.qconfig_file
        return {**out, "weight": self.weight, "activation": self.activation, "kv": self.kv,
                "minority_layers": self.minority_layers}


def set_precision(stats: Stats, p: Precision) -> None:
    stats["precision"] = p.to_json()


def set_section(stats: Stats, key: str, value: object) -> None:
    """One of the sections other parts compute whole (docs/stats.md): `llm`, `pe_choice`,
    `replay`, `verify`, `kernel`, `generation`, `moe`, `parallel`."""
    if key not in ("llm", "pe_choice", "replay", "verify", "kernel", "generation", "moe",
                   "parallel"):
        raise KeyError(f"stats.json has no section {key!r} (docs/stats.md)")
    stats[key] = value


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
    """The most utilized resource (engine channel, link or memory), ties by name, and the
    run's bound verdict it gives (`bound_by`, report.verdict.bound_class)."""
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
        return {"component": None, "kind": None, "utilization": 0.0, "bound_by": None}
    u, name, kind = max(cands, key=lambda c: (c[0], c[1]))
    return {"component": name, "kind": kind, "utilization": u, "bound_by": bound_class(kind)}


def write_json(obj: object, path: Path) -> None:
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
