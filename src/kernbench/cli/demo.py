"""`kernbench demo`: run a bundled workload on the default NPU and write out/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, TopologyOpt, err


@app.command("demo")
def demo(
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
) -> None:
    """Run the built-in GEMM pipeline scenario and print its report."""
    from kernbench.report.perfetto import build_trace
    from kernbench.report.stats import collect_stats
    from kernbench.report.summary import print_summary, write_outputs
    from kernbench.scenarios import gemm_pipeline
    from kernbench.topology import load_topology

    topo = load_topology(topology, set_ or [])
    err.print(f"[bold]kernbench demo[/]: composite GEMM pipeline on every PE of '{topo.name}'")
    sim, cmds = gemm_pipeline(topo)
    total = sim.run()
    stats = collect_stats(sim, total)
    paths = write_outputs(out, stats, build_trace(sim, cmds))
    print_summary(stats, err)
    err.print("wrote " + ", ".join(str(p) for p in paths))
