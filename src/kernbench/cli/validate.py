"""`kernbench validate FILE [--topology NAME|FILE]`: check without simulating.

FILE may be a CMDQ program (JSON with a `cmdq` list), a bundle folder (its cmdq.json),
an IR file (JSON with a `graph`), or a topology YAML. Every problem is printed as one
line on stderr; exit 2 if there is any, 0 (and a one-line OK on stderr) otherwise. A CMDQ
field that is unknown but close to a known one gets a `warning:` line (exit unchanged).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, err, preset_list
from kernbench.errors import InputError


def _kind(path: Path) -> str:
    if path.is_dir():
        return "cmdq"
    if path.suffix in (".yaml", ".yml"):
        return "topology"
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=str(path)) from None
    text = head.decode("utf-8", errors="replace")
    if '"cmdq"' in text:
        return "cmdq"
    if '"graph"' in text or '"ir_version"' in text:
        return "ir"
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "cmdq"  # let the CMDQ reader report the malformed JSON precisely
    if isinstance(obj, dict) and ("graph" in obj or "ir_version" in obj):
        return "ir"
    return "cmdq"


@app.command("validate")
def validate(
    file: Annotated[Path, typer.Argument(help="CMDQ JSON, bundle folder, ir.json or topology YAML")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", help=f"preset ({preset_list()}) or YAML (default: a bundle's own "
                                 "topology.yaml, "
                                 "else small)")] = None,
    set_: SetOpt = None,
    max_errors: Annotated[int, typer.Option(help="stop after this many problems")] = 50,
) -> None:
    """Check a CMDQ program, IR file or topology without simulating."""
    from kernbench.topology import load_topology

    check_input_path(file)
    kind = _kind(file)
    if kind == "topology":
        topo = load_topology(str(file), set_ or [])
        err.print(f"OK: {file}: topology '{topo.name}', {len(topo.pes)} PEs")
        return
    if kind == "ir":
        from kernbench.ir import validate_ir_file

        graph = validate_ir_file(file)
        n = len(getattr(graph, "nodes", []) or [])
        err.print(f"OK: {file}: IR graph with {n} layers")
        return
    from kernbench.cmdq.hw import limits_for
    from kernbench.cmdq.validate import validate_file_report

    warnings: list[str] = []
    if file.is_dir():  # a bundle: everything in it, on its own NPU unless told otherwise
        own = file / "topology.yaml"
        topo = load_topology(topology or (str(own) if own.is_file() else "small"), set_ or [])
        from kernbench.host.bundle_check import check_bundle

        problems = check_bundle(file, topo, max_errors=max_errors)
        path = file
    else:
        path = file
        topo = load_topology(topology or "small", set_ or [])
        problems, warnings = validate_file_report(path, limits_for(topo), max_errors=max_errors)
    for w in warnings:  # unknown fields are kept (spec §14), but a near miss is worth a line
        print(f"warning: {w}", file=sys.stderr)
    for p in problems:  # errors bypass the console: --quiet never hides them
        print(f"error: {p}", file=sys.stderr)
    if problems:
        raise typer.Exit(2)
    what = "consistent bundle" if file.is_dir() else "valid CMDQ program"
    err.print(f"OK: {path}: {what} for '{topo.name}'")


def check_input_path(file: Path) -> None:
    """A folder, or a regular file within the size limit (never block on a FIFO)."""
    from kernbench.errors import MAX_JSON_BYTES, check_input_file

    if not file.is_dir():
        check_input_file(file, MAX_JSON_BYTES)
