"""`kernbench simulate PROGRAM [--topology] [--set k=v]... [--out DIR] [--verify]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import (
    EntriesOpt,
    JsonOpt,
    QuietOpt,
    SaveOplogOpt,
    SetOpt,
    TraceOpt,
    err,
    preset_list,
    set_quiet,
)
from kernbench.config.energy import timing_view


@app.command("simulate")
def simulate(
    program: Annotated[Path, typer.Argument(help="cmdq.json or a bundle folder")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", help=f"preset ({preset_list()}) or YAML (default: the bundle's, else small)")] = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    verify: Annotated[bool, typer.Option("--verify", help="run the data pass and check "
                                                          "(bundles only)")] = False,
    inputs: Annotated[Path | None, typer.Option("--inputs", help="inputs .npz")] = None,
    dump_intermediates: Annotated[bool, typer.Option(
        "--dump-intermediates", help="compare every layer's output")] = False,
    trace: TraceOpt = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip report.html")] = False,
    save_oplog: SaveOplogOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="NaN/Inf inputs are errors")] = False,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
    entries: EntriesOpt = False,
) -> None:
    """Run a CMDQ program on the NPU model; write stats.json (+ trace.json with --trace)."""
    from kernbench.cli.compile import simulate_and_report
    from kernbench.cli.outdir import OutDir
    from kernbench.cli.progress import Phases
    from kernbench.errors import InputError
    from kernbench.topology import load_topology

    set_quiet(quiet)
    if not program.exists():
        raise InputError("no such file or folder", file=str(program))
    bundled = program / "topology.yaml" if program.is_dir() else None
    if topology is None:
        topology = str(bundled) if bundled is not None and bundled.exists() else "small"
        if bundled is not None and not bundled.exists():
            err.print("note: the bundle has no topology.yaml: simulating on 'small'")
    topo = load_topology(topology, set_ or [])
    if (bundled is not None and bundled.exists() and str(bundled) != topology
            and timing_view(load_topology(str(bundled)).config.model_dump())
            != timing_view(topo.config.model_dump())):  # energy/area prices never move timing
        err.print(f"warning: the bundle was compiled for a different NPU "
                  f"({bundled}); simulating it on '{topo.name}'")
    err.print(f"simulating {program} on '{topo.name}'")
    with OutDir(out, keep=[program]) as stage:
        ok = simulate_and_report(program, topo, stage, verify, inputs, dump_intermediates,
                                 trace, not no_report, phases=Phases(err, enabled=not quiet),
                                 as_json=json_, strict=strict, save_oplog=save_oplog,
                                 entries=entries)
    err.print(f"wrote {out}/")
    if not ok:
        raise typer.Exit(1)
