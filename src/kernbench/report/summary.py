"""Human summary of a run (rich tables on stderr) and writing the output folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kernbench.report.energy import fmt_energy
from kernbench.report.result_text import layer_legend
from kernbench.report.stats import write_json


def write_outputs(out_dir: Path, stats: dict[str, Any], trace: dict[str, Any]) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "stats.json", out_dir / "trace.json"]
    write_json(stats, paths[0])
    write_json(trace, paths[1])
    return paths


def print_summary(stats: dict[str, Any], console: Console, top: int = 12) -> None:
    """The tables of a run on stderr: engine utilization and the critical path. The
    summary's figures (total, bottleneck, energy) are stdout's, printed once there."""
    t = Table(title="engine utilization (busiest first)", show_lines=False)
    t.add_column("engine")
    t.add_column("busy_ns", justify="right")
    t.add_column("utilization", justify="right")
    t.add_column("ops", justify="right")
    rows = sorted(stats["engines"].items(), key=lambda kv: (-kv[1]["utilization"], kv[0]))
    for cid, e in rows[:top]:
        t.add_row(cid, f"{e['busy_ns']:,.1f}", f"{100 * e['utilization']:.1f}%", str(e["ops"]))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more engines in stats.json"
    console.print(t)
    crit = stats.get("critical_path")
    if crit:
        console.print(f"[bold]critical path[/] ({len(crit)} entries): "
                      + " → ".join(str(i) for i in crit[:20])
                      + (" …" if len(crit) > 20 else ""))


def print_layers(stats: dict[str, Any], console: Console, top: int = 10) -> None:
    """The slowest layers on stderr, columns named as stats.json's keys (summary.txt has
    every layer), with what the columns mean."""
    t = Table(title="layers (slowest first)")
    cols = ("layer", "op_type", "ns", "busy_ns", "bound_ns", "roofline_fraction", "bound_by",
            "energy", "bottleneck")
    for col in cols:
        t.add_column(col, justify="right" if col in ("ns", "busy_ns", "bound_ns",
                                                     "roofline_fraction", "energy")
                     else "left", min_width=len(col), no_wrap=True)
    rows = sorted(stats["layers"].items(), key=lambda kv: (-kv[1]["ns"], kv[0]))
    for lid, layer in rows[:top]:
        t.add_row(lid, layer["op_type"], f"{layer['ns']:,.0f}",
                  f"{layer.get('busy_ns', 0.0):,.0f}", f"{layer['bound_ns']:,.0f}",
                  f"{layer['roofline_fraction']:.2f}", layer["bound_by"],
                  fmt_energy(layer.get("energy_pj", 0.0)), str(layer["bottleneck"]))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more layers in summary.txt and stats.json"
    if console.quiet:
        return
    # the headers are stats.json's key names: drawn whole even where the console is narrow
    wide = Console(file=console.file, width=max(console.width, 140), highlight=False,
                   force_terminal=console.is_terminal, no_color=console.no_color)
    wide.print(t)
    for line in layer_legend(stats):
        console.print(line, style="dim")
