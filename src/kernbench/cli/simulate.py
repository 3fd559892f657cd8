"""`kernbench simulate PROGRAM [--topology] [--set k=v]... [--out DIR]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, err


@app.command("simulate")
def simulate(
    program: Annotated[Path, typer.Argument(help="cmdq.json or a bundle folder")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", help="preset or YAML (default: the bundle's, else small)")] = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    no_trace: Annotated[bool, typer.Option("--no-trace", help="skip trace.json")] = False,
) -> None:
    """Run a CMDQ program on the NPU model; write stats.json and trace.json."""
    from kernbench.cmdq.io import load_program
    from kernbench.cmdq.simulate import simulate_program
    from kernbench.report.stats import write_json
    from kernbench.report.summary import print_summary
    from kernbench.topology import load_topology

    path = program / "cmdq.json" if program.is_dir() else program
    if topology is None:
        bundled = program / "topology.yaml" if program.is_dir() else None
        topology = str(bundled) if bundled is not None and bundled.exists() else "small"
    topo = load_topology(topology, set_ or [])
    prog = load_program(path)
    err.print(f"simulating {path} ({len(prog.cmdq)} entries) on '{topo.name}'")
    run = simulate_program(prog, topo, file=str(path), trace=not no_trace)
    stats = run.stats()
    out.mkdir(parents=True, exist_ok=True)
    write_json(stats, out / "stats.json")
    written = [out / "stats.json"]
    if not no_trace:
        write_json(run.trace(), out / "trace.json")
        written.append(out / "trace.json")
    print_summary(stats, err)
    err.print("wrote " + ", ".join(str(p) for p in written))
