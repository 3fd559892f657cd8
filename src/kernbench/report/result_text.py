"""The plain-text result of a run: the summary that goes to stdout and summary.txt."""

from __future__ import annotations

from kernbench.report.energy import energy_lines, fmt_energy
from kernbench.report.llm import llm_lines
from kernbench.report.stats import Stats


def _ns_or_dash(v: float | None) -> str:
    """A 10-wide ns column; "–" where the figure was not computed (a streamed run has no
    cost-model estimate)."""
    return f"{v:10.1f}" if v is not None else f"{'–':>10s}"


def summary_text(stats: Stats, verdict: list[str] | None = None) -> str:
    """The run's summary (stdout and summary.txt); `verdict`: the verification's lines
    (host.verify.Verdict.lines), when one ran."""
    lines = [f"total {stats['total_ns']:.1f} ns = {stats['total_cycles']} cycles at "
             f"{stats['clock_ghz']} GHz on {stats['topology']}"]
    b = stats["bottleneck"]
    lines.append(f"bottleneck: {b['component']} ({b['kind']}), {100 * b['utilization']:.1f}% busy")
    lines += energy_lines(stats)
    if stats.get("estimate_ns"):
        lines.append(f"cost-model estimate {stats['estimate_ns']:.1f} ns "
                     f"({stats['estimate_ns'] / stats['total_ns']:.2f} × simulated)"
                     if stats["total_ns"] else f"cost-model estimate {stats['estimate_ns']:.1f} ns")
    if "roofline_fraction" in stats:
        lines.append(f"roofline fraction (whole model): {stats['roofline_fraction']:.3f}")
        mb = stats["model_bound"]
        lines.append(f"the model is {mb['bound_by']}-bound: Σ compute bound "
                     f"{mb['compute_bound_ns']:.1f} ns vs Σ memory bound "
                     f"{mb['memory_bound_ns']:.1f} ns")
        lines.append("")
        lines.append(f"{'layer':28s} {'op':12s} {'ns':>10s} {'estimate':>10s} {'busy ns':>10s} "
                     f"{'estimate':>10s} {'bound ns':>10s} "
                     f"{'frac':>6s} {'bound by':8s} {'energy':>10s} busiest")
        for lid, layer in sorted(stats["layers"].items(), key=lambda kv: -kv[1]["ns"]):
            lines.append(f"{lid:28s} {layer['op_type']:12s} {layer['ns']:10.1f} "
                         f"{_ns_or_dash(layer.get('estimate_ns'))} "
                         f"{layer.get('busy_ns', 0.0):10.1f} "
                         f"{_ns_or_dash(layer.get('estimate_busy_ns'))} "
                         f"{layer['bound_ns']:10.1f} {layer['roofline_fraction']:6.3f} "
                         f"{layer['bound_by']:8s} {fmt_energy(layer.get('energy_pj', 0)):>10s} "
                         f"{layer['bottleneck']}")
    if "llm" in stats:

        lines.append("")
        lines.extend(llm_lines(stats["llm"]))
    if "replay" in stats:
        r = stats["replay"]
        lines.append(f"replay: {r['simulated_blocks']} of {r['blocks']} identical blocks "
                     f"simulated, period {r['block_period_ns']:.1f} ns (simulated periods "
                     + ", ".join(f"{p:.1f}" for p in r["periods_ns"])
                     + " ns); per-layer rows are the simulated blocks")
    if verdict is not None:
        lines.append("")
        lines.extend(verdict)
    return "\n".join(lines) + "\n"
