"""The plain-text result of a run: the summary (stdout, once) and summary.txt (the summary
and the whole layer table). Every figure carries the name docs/stats.md defines it by; times,
power and energy are in human units (the raw numbers are in stats.json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernbench.report.energy import energy_lines, fmt_energy
from kernbench.report.llm import llm_lines
from kernbench.report.stats import Stats
from kernbench.report.units import fmt_time
from kernbench.report.verdict import bottleneck_line

#: the layer table's columns: stats.json's key of each (docs/stats.md "layer")
LAYER_COLUMNS = ("layer", "op_type", "ns", "estimate_ns", "busy_ns", "estimate_busy_ns",
                 "bound_ns", "roofline_fraction", "bound_by", "energy", "bottleneck")
_FIELDS = {"weight": "weights", "activation": "activations", "kv": "KV cache"}


def precision_line(p: Mapping[str, Any]) -> str:
    """'precision (defaults): weights int8, activations int8, KV cache int8' (a QConfig
    file is named: 'precision (qconfig w4.yaml): ...'); a class with
    several widths lists each with its layer count and the layers off the common width."""
    parts = []
    for key, name in _FIELDS.items():
        widths = p.get(key) or {}
        if not widths:
            continue
        if len(widths) == 1:
            parts.append(f"{name} {next(iter(widths))}")
            continue
        common = max(sorted(widths), key=lambda w: widths[w])
        odd = [lid for lid, v in p.get("minority_layers", {}).items() if key in v]
        shown = ", ".join(odd[:4]) + (", …" if len(odd) > 4 else "")
        parts.append(f"{name} {common} ({widths[common]} layers), "
                     + ", ".join(f"{w} ({n}: {shown})" if len(widths) == 2 else f"{w} ({n})"
                                 for w, n in sorted(widths.items()) if w != common))
    source = p["source"] + (f" {p['qconfig_file']}" if p.get("qconfig_file") else "")
    return f"precision ({source}): " + "; ".join(parts)


def summary_lines(stats: Stats, verdict: list[str] | None = None) -> list[str]:
    """The run's result: what stdout prints once, and summary.txt begins with."""
    total = stats["total_ns"]
    lines = [f"total {fmt_time(total)} = {stats['total_cycles']:,} cycles at "
             f"{stats['clock_ghz']:g} GHz on '{stats['topology']}'"]
    if "precision" in stats:
        lines.append(precision_line(stats["precision"]))
    lines.append(bottleneck_line(stats["bottleneck"]))
    lines += energy_lines(stats)
    if stats.get("estimate_ns"):
        lines.append(f"cost-model estimate {fmt_time(stats['estimate_ns'])}"
                     + (f" ({stats['estimate_ns'] / total:.2f} × total)" if total else ""))
    if "roofline_fraction" in stats:
        mb = stats["model_bound"]
        lines.append(f"roofline fraction {stats['roofline_fraction']:.3f} (Σ per-layer "
                     f"roofline bounds / total; Σ compute bounds "
                     f"{fmt_time(mb['compute_bound_ns'])}, Σ memory bounds "
                     f"{fmt_time(mb['memory_bound_ns'])})")
    if "llm" in stats:
        lines.extend(llm_lines(stats["llm"]))
    if "replay" in stats:
        r = stats["replay"]
        lines.append(f"replay: {r['simulated_blocks']} of {r['blocks']} identical blocks "
                     f"simulated, block period {fmt_time(r['block_period_ns'])}; the layer "
                     "table covers the simulated blocks")
    if verdict is not None:
        lines.extend(verdict)
    return lines


def _ns_or_dash(v: float | None, width: int) -> str:
    """An ns column; "–" where the figure was not computed (a streamed run has no
    cost-model estimate)."""
    return f"{v:{width}.1f}" if v is not None else f"{'–':>{width}s}"


def layer_legend(stats: Stats) -> list[str]:
    """What the layer table's columns mean, and why its `ns` add up to more than total."""
    layers = stats.get("layers") or {}
    span_sum = sum(v["ns"] for v in layers.values())
    total = stats["total_ns"]
    out = ["ns: a layer's span, its first command's start to its last one's end; layers "
           "overlap, so a span includes the time the layer waits behind others"
           + (f" (Σ ns {fmt_time(span_sum)} = {span_sum / total:.1f} × total)"
              if total and span_sum > total else ""),
           "busy_ns: the layer's own time on its busiest PE; estimate_ns / estimate_busy_ns: "
           "the cost model's estimates of ns / busy_ns ('–': not estimated in a streamed run)",
           "bound_ns: the layer's roofline bound (larger of compute and memory, bound_by); "
           "roofline_fraction = bound_ns / ns; bottleneck: the engine class busiest in the "
           "layer (docs/stats.md)"]
    return out


def layer_table_lines(stats: Stats) -> list[str]:
    """Every layer, slowest span first, under columns named as stats.json's keys."""
    w = {c: max(len(c), 10) for c in LAYER_COLUMNS}
    w["layer"], w["op_type"], w["bound_by"] = 28, 12, 8
    lines = [" ".join(f"{c:{w[c]}s}" if c in ("layer", "op_type", "bound_by") else
                      (c if c == "bottleneck" else f"{c:>{w[c]}s}") for c in LAYER_COLUMNS)]
    for lid, layer in sorted(stats["layers"].items(), key=lambda kv: (-kv[1]["ns"], kv[0])):
        lines.append(" ".join([
            f"{lid:{w['layer']}s}", f"{layer['op_type']:{w['op_type']}s}",
            f"{layer['ns']:{w['ns']}.1f}", _ns_or_dash(layer.get("estimate_ns"),
                                                       w["estimate_ns"]),
            f"{layer.get('busy_ns', 0.0):{w['busy_ns']}.1f}",
            _ns_or_dash(layer.get("estimate_busy_ns"), w["estimate_busy_ns"]),
            f"{layer['bound_ns']:{w['bound_ns']}.1f}",
            f"{layer['roofline_fraction']:{w['roofline_fraction']}.3f}",
            f"{layer['bound_by']:{w['bound_by']}s}",
            f"{fmt_energy(layer.get('energy_pj', 0)):>{w['energy']}s}",
            str(layer["bottleneck"])]))
    return lines + [""] + layer_legend(stats)


def stdout_text(stats: Stats, verdict: list[str] | None = None) -> str:
    """The result on stdout: the summary, once (the tables go to stderr)."""
    return "\n".join(summary_lines(stats, verdict)) + "\n"


def summary_text(stats: Stats, verdict: list[str] | None = None) -> str:
    """summary.txt: the summary, then the whole layer table with its legend."""
    lines = summary_lines(stats, verdict)
    if stats.get("layers"):
        lines += [""] + layer_table_lines(stats)
    return "\n".join(lines) + "\n"
