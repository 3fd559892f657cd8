"""`kernbench simulate PROGRAM [--topology] [--set k=v]... [--out DIR] [--verify]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SaveOplogOpt, SetOpt, err


@app.command("simulate")
def simulate(
    program: Annotated[Path, typer.Argument(help="cmdq.json or a bundle folder")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", help="preset or YAML (default: the bundle's, else small)")] = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    verify: Annotated[bool, typer.Option("--verify", help="run the data pass and check "
                                                          "(bundles only)")] = False,
    inputs: Annotated[Path | None, typer.Option("--inputs", help="inputs .npz")] = None,
    dump_intermediates: Annotated[bool, typer.Option(
        "--dump-intermediates", help="compare every layer's output")] = False,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="skip trace.json")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip report.html")] = False,
    save_oplog: SaveOplogOpt = None,
) -> None:
    """Run a CMDQ program on the NPU model; write stats.json and trace.json."""
    from kernbench.cli.compile import simulate_and_report
    from kernbench.topology import load_topology

    bundled = program / "topology.yaml" if program.is_dir() else None
    if topology is None:
        topology = str(bundled) if bundled is not None and bundled.exists() else "small"
        if bundled is not None and not bundled.exists():
            err.print("note: the bundle has no topology.yaml: simulating on 'small'")
    topo = load_topology(topology, set_ or [])
    if (bundled is not None and bundled.exists() and str(bundled) != topology
            and load_topology(str(bundled)).config != topo.config):
        err.print(f"warning: the bundle was compiled for a different NPU "
                      f"({bundled}); simulating it on '{topo.name}'")
    if not program.exists():
        from kernbench.errors import InputError

        raise InputError("no such file or folder", file=str(program))
    err.print(f"simulating {program} on '{topo.name}'")
    simulate_and_report(program, topo, out, verify, inputs, dump_intermediates, not no_trace,
                        not no_report, save_oplog=save_oplog)
