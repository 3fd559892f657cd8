"""Energy of a run: action counts × per-action energies + static power × time.

Pure functions of (topology, action counts, total time): the counts are the ones the
engines recorded beside their timing (kernbench.components.actions), the prices come from
the topology's energy parameters (kernbench.config.energy), so changing a price changes
only its own share of the energy, never the timing. Units: pJ, ns, mW (mW × ns = pJ,
so average power in mW is pJ / ns); TOPS/W = 2 × MACs / pJ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernbench.components.actions import ACTIONS, ActionLedger
from kernbench.report.units import fmt_power
from kernbench.topology.model import Topology

#: action → (component kind it is charged to, path of its price under `cube`)
PRICE_KEYS: dict[str, tuple[str, str]] = {
    "mac_int4": ("pe_gemm", "pe_template.pe_gemm.energy_pj_per_mac_int4"),
    "mac_int8": ("pe_gemm", "pe_template.pe_gemm.energy_pj_per_mac_int8"),
    "mac_fp16": ("pe_gemm", "pe_template.pe_gemm.energy_pj_per_mac_fp16"),
    "mac_fp32": ("pe_gemm", "pe_template.pe_gemm.energy_pj_per_mac_fp32"),
    "math_lane_cycle": ("pe_math", "pe_template.pe_math.energy_pj_per_lane_cycle"),
    "hbm_byte": ("hbm_ctrl", "hbm_ctrl.energy_pj_per_byte"),
    "sram_byte": ("shared_sram", "shared_sram.energy_pj_per_byte"),
    "tcm_read_byte": ("pe_tcm", "pe_template.pe_tcm.energy_pj_per_byte_read"),
    "tcm_write_byte": ("pe_tcm", "pe_template.pe_tcm.energy_pj_per_byte_write"),
    "rf_write_byte": ("pe_fetch_store", "pe_template.pe_fetch_store.energy_pj_per_byte_rf_write"),
    "rf_read_byte": ("pe_fetch_store", "pe_template.pe_fetch_store.energy_pj_per_byte_rf_read"),
    "mesh_hop_byte": ("router", "router.energy_pj_per_byte_hop"),
    "port_byte": ("router", "router.energy_pj_per_byte_port"),
    "ucie_byte": ("ucie", "-"),  # lives under sip.ucie
    "chip_link_byte": ("chip_link", "-"),  # lives under system.link
}
MAC_ACTIONS = ("mac_int4", "mac_int8", "mac_fp16", "mac_fp32")
POWER_BINS = 200  # bins of the trace's power counter track


def _pj(x: float) -> float:
    return round(float(x), 3)


def action_prices(topology: Topology) -> dict[str, tuple[str, float]]:
    """action → (component kind, pJ per unit) from the topology's energy parameters."""
    cfg = topology.config
    out: dict[str, tuple[str, float]] = {}
    for action, (kind, path) in PRICE_KEYS.items():
        if action == "ucie_byte":
            out[action] = (kind, cfg.sip.ucie.energy_pj_per_byte)
            continue
        if action == "chip_link_byte":
            out[action] = (kind, cfg.system.link.energy_pj_per_byte if cfg.system else 0.0)
            continue
        obj: Any = cfg.cube
        for part in path.split("."):
            obj = getattr(obj, part) if obj is not None else None
        out[action] = (kind, float(obj) if obj is not None else 0.0)
    return out


def static_power_mw(topology: Topology) -> dict[str, float]:
    """Static power by component kind (mW): every instance's `static_power_mw`, and the
    UCIe links' (one per directed link)."""
    out: dict[str, float] = {}
    for nid in sorted(topology.nodes):
        node = topology.nodes[nid]
        p = getattr(node.spec, "static_power_mw", 0.0)
        out[node.kind] = out.get(node.kind, 0.0) + p
    n_ucie = sum(1 for link in topology.links.values() if link.kind == "ucie")
    if n_ucie:
        out["ucie"] = out.get("ucie", 0.0) + n_ucie * topology.config.sip.ucie.static_power_mw
    n_chip = sum(1 for link in topology.links.values() if link.kind == "chip_link")
    if n_chip and topology.config.system is not None:
        out["chip_link"] = n_chip * topology.config.system.link.static_power_mw
    return out


def dynamic_by_kind(prices: Mapping[str, tuple[str, float]],
                    counts: Mapping[str, int]) -> dict[str, float]:
    """Dynamic energy (pJ) by component kind of the given action counts."""
    out: dict[str, float] = {}
    for action in ACTIONS:
        n = counts.get(action, 0)
        if n:
            kind, price = prices[action]
            out[kind] = out.get(kind, 0.0) + n * price
    return out


@dataclass(frozen=True)
class EnergyReport:
    """The energy of one run (stats.json `energy`, docs/stats.md)."""

    total_ns: float
    counts: dict[str, int]
    dynamic_pj_by_kind: dict[str, float]
    static_pj_by_kind: dict[str, float]
    tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dynamic_pj(self) -> float:
        return sum(self.dynamic_pj_by_kind[k] for k in sorted(self.dynamic_pj_by_kind))

    @property
    def static_pj(self) -> float:
        return sum(self.static_pj_by_kind[k] for k in sorted(self.static_pj_by_kind))

    @property
    def total_pj(self) -> float:
        return self.dynamic_pj + self.static_pj

    @property
    def macs(self) -> int:
        return sum(self.counts.get(a, 0) for a in MAC_ACTIONS)

    def to_json(self) -> dict[str, Any]:
        kinds = sorted(set(self.dynamic_pj_by_kind) | set(self.static_pj_by_kind))
        total = self.total_pj
        return {
            "total_pj": _pj(total),
            "dynamic_pj": _pj(self.dynamic_pj),
            "static_pj": _pj(self.static_pj),
            "average_power_mw": _pj(total / self.total_ns) if self.total_ns > 0 else 0.0,
            "ops": 2 * self.macs,
            "tops_per_w": round(2 * self.macs / total, 6) if total > 0 else 0.0,
            "by_component_kind": {
                k: {"dynamic_pj": _pj(self.dynamic_pj_by_kind.get(k, 0.0)),
                    "static_pj": _pj(self.static_pj_by_kind.get(k, 0.0)),
                    "total_pj": _pj(self.dynamic_pj_by_kind.get(k, 0.0)
                                    + self.static_pj_by_kind.get(k, 0.0))}
                for k in kinds},
            # chip_link_byte only where it counted something: a one-chip report keeps its keys
            "actions": {a: int(self.counts.get(a, 0)) for a in ACTIONS
                        if a != "chip_link_byte" or self.counts.get(a, 0)},
        }


def energy_report(topology: Topology, counts: Mapping[str, int], total_ns: float) -> EnergyReport:
    """Price a run: dynamic = Σ count × price per action; static = Σ static power × total_ns."""
    prices = action_prices(topology)
    static = {k: mw * total_ns for k, mw in static_power_mw(topology).items()}
    return EnergyReport(total_ns, dict(counts), dynamic_by_kind(prices, counts), static)


def group_energy(topology: Topology, ledger: ActionLedger, groups: Mapping[str, Iterable[int]],
                 spans_ns: Mapping[str, float], total_ns: float) -> dict[str, dict[str, Any]]:
    """Energy of groups of commands (e.g. the CMDQ entries of a layer): the dynamic energy
    of their own actions, by kind, plus a share of the run's static energy proportional to
    the group's span in `spans_ns` over the sum of all groups' spans (so that the groups'
    static shares add up to the run's static energy)."""
    prices = action_prices(topology)
    static = sum(mw for mw in static_power_mw(topology).values()) * total_ns
    span_sum = sum(spans_ns.get(g, 0.0) for g in groups)
    out: dict[str, dict[str, Any]] = {}
    for g in sorted(groups):
        dyn = dynamic_by_kind(prices, ledger.for_seqs(groups[g]))
        share = static * spans_ns.get(g, 0.0) / span_sum if span_sum > 0 else 0.0
        by_kind = {k: _pj(v) for k, v in sorted(dyn.items())}
        by_kind["static"] = _pj(share)
        out[g] = {"energy_pj": _pj(sum(dyn[k] for k in sorted(dyn)) + share),
                  "energy_by_kind_pj": by_kind}
    return out


def power_counter_events(topology: Topology, events: list[tuple[float, float, str, int]],
                         total_ns: float, pid: int, bins: int = POWER_BINS) -> list[dict]:
    """Perfetto counter ("C") events: average power (mW) per time bin, in total and by
    component kind, static included. Each action's energy is spread evenly over its
    interval (an instantaneous one falls in the bin of its start), so Σ power × bin width
    is the run's energy."""
    if total_ns <= 0:
        return []
    prices = action_prices(topology)
    width = total_ns / bins
    per: list[dict[str, float]] = [{} for _ in range(bins)]
    for start, end, action, amount in events:
        kind, price = prices[action]
        e = amount * price
        if not e:
            continue
        b0 = min(int(start / width), bins - 1)
        if end <= start:
            per[b0][kind] = per[b0].get(kind, 0.0) + e
            continue
        b1 = min(int(end / width), bins - 1)
        for b in range(b0, b1 + 1):
            lo, hi = max(start, b * width), min(end, (b + 1) * width)
            if b == bins - 1:
                hi = max(hi, end)  # an interval past total_ns (rounding) stays in the last bin
            if hi > lo:
                per[b][kind] = per[b].get(kind, 0.0) + e * (hi - lo) / (end - start)
    static = sum(static_power_mw(topology).values())
    kinds = sorted({k for row in per for k in row})
    out: list[dict] = []
    for b, row in enumerate(per):
        ts = round(b * width / 1000.0, 6)
        series = {k: round(row.get(k, 0.0) / width, 6) for k in kinds}
        series["static"] = round(static, 6)
        total = sum(row.values()) / width + static
        out.append({"ph": "C", "name": "power_mw", "pid": pid, "ts": ts,
                    "args": {"total": round(total, 6)}})
        out.append({"ph": "C", "name": "power_mw by kind", "pid": pid, "ts": ts,
                    "args": series})
    end_ts = round(total_ns / 1000.0, 6)
    out.append({"ph": "C", "name": "power_mw", "pid": pid, "ts": end_ts, "args": {"total": 0.0}})
    out.append({"ph": "C", "name": "power_mw by kind", "pid": pid, "ts": end_ts,
                "args": dict.fromkeys([*kinds, "static"], 0.0)})
    return out


def fmt_energy(pj: float) -> str:
    """pJ with an SI prefix: 12.3 pJ, 4.56 nJ, 7.89 µJ, 1.23 mJ, 4.56 J."""
    for scale, unit in ((1e12, "J"), (1e9, "mJ"), (1e6, "µJ"), (1e3, "nJ")):
        if abs(pj) >= scale:
            return f"{pj / scale:.3g} {unit}"
    return f"{pj:.3g} pJ"


def energy_lines(stats: Mapping[str, Any], top: int = 6) -> list[str]:
    """The energy part of the run summary (summary.txt and the console)."""
    e = stats.get("energy")
    if not e:
        return []
    lines = [f"energy per inference {fmt_energy(e['total_pj'])} (dynamic "
             f"{fmt_energy(e['dynamic_pj'])}, static {fmt_energy(e['static_pj'])}), average "
             f"power {fmt_power(e['average_power_mw'])}, {e['tops_per_w']:.3f} TOPS/W"]
    if e.get("tokens"):
        lines.append(f"energy per token {fmt_energy(e['per_token_pj'])} "
                     f"({e['tokens']} tokens per run)")
    kinds = sorted(e["by_component_kind"].items(), key=lambda kv: (-kv[1]["total_pj"], kv[0]))
    total = e["total_pj"] or 1.0
    lines.append("energy by component kind: " + ", ".join(
        f"{k} {100 * v['total_pj'] / total:.1f}%" for k, v in kinds[:top]))
    return lines
