"""Human summary of a run (rich tables on stderr) and writing the output folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kernbench.report.energy import energy_lines, fmt_energy
from kernbench.report.stats import write_json


def write_outputs(out_dir: Path, stats: dict[str, Any], trace: dict[str, Any]) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "stats.json", out_dir / "trace.json"]
    write_json(stats, paths[0])
    write_json(trace, paths[1])
    return paths


def print_summary(stats: dict[str, Any], console: Console, top: int = 12) -> None:
    console.print(
        f"[bold]total[/] {stats['total_ns']:,.1f} ns = {stats['total_cycles']:,} cycles "
        f"@ {stats['clock_ghz']:g} GHz on '{stats['topology']}'"
    )
    t = Table(title="engine utilization (busiest first)", show_lines=False)
    t.add_column("engine")
    t.add_column("busy ns", justify="right")
    t.add_column("util", justify="right")
    t.add_column("ops", justify="right")
    rows = sorted(stats["engines"].items(), key=lambda kv: (-kv[1]["utilization"], kv[0]))
    for cid, e in rows[:top]:
        t.add_row(cid, f"{e['busy_ns']:,.1f}", f"{100 * e['utilization']:.1f}%", str(e["ops"]))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more engines in stats.json"
    console.print(t)
    b = stats["bottleneck"]
    if b["component"]:
        console.print(f"[bold]bottleneck[/]: {b['component']} ({b['kind']}) busy "
                      f"{100 * b['utilization']:.1f}% of the time")
    for line in energy_lines(stats):
        console.print(line)
    crit = stats.get("critical_path")
    if crit:
        console.print(f"[bold]critical path[/] ({len(crit)} entries): "
                      + " → ".join(str(i) for i in crit[:20])
                      + (" …" if len(crit) > 20 else ""))


def print_layers(stats: dict[str, Any], console: Console, top: int = 10) -> None:
    t = Table(title=f"layers (slowest first); whole-model roofline fraction "
                    f"{stats.get('roofline_fraction', 0):.3f}")
    for col in ("layer", "op", "ns", "bound ns", "roofline", "bound by", "energy", "busiest"):
        t.add_column(col, justify="right" if col in ("ns", "bound ns", "roofline", "energy")
                     else "left")
    rows = sorted(stats["layers"].items(), key=lambda kv: (-kv[1]["ns"], kv[0]))
    for lid, layer in rows[:top]:
        t.add_row(lid, layer["op_type"], f"{layer['ns']:,.0f}", f"{layer['bound_ns']:,.0f}",
                  f"{layer['roofline_fraction']:.2f}", layer["bound_by"],
                  fmt_energy(layer.get("energy_pj", 0.0)), str(layer["bottleneck"]))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more layers in stats.json"
    console.print(t)
    mb = stats.get("model_bound")
    if mb:
        console.print(f"[bold]the model is {mb['bound_by']}-bound[/]: Σ compute bound "
                      f"{mb['compute_bound_ns']:,.0f} ns vs Σ memory bound "
                      f"{mb['memory_bound_ns']:,.0f} ns (per-layer rooflines)")
