"""Options shared by several commands, the stderr console, and where results go.

Conventions (docs/errors.md): results on stdout (the summary text, or stats.json with
`--json`); diagnostics, progress and tables on stderr. `--quiet` silences the tables and
progress bars on stderr but never an error or a warning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True)


def preset_list() -> str:
    """The bundled presets, comma-separated, read from the presets folder without importing
    the config layer (`--help` stays fast)."""
    import importlib.util

    spec = importlib.util.find_spec("kernbench.config")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations))) / "presets"
    return ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))


TopologyOpt = Annotated[
    str, typer.Option("--topology", "-t",
                      help=f"preset name ({preset_list()}) or topology YAML file")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a topology key: a.b.c=value (repeatable)"),
]
SaveOplogOpt = Annotated[
    Path | None,
    typer.Option("--save-oplog", help="with --verify: save the op log and the initial memory "
                                      "to this folder (kernbench replay DIR)"),
]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", help="no tables or progress bars on stderr (errors and warnings remain)")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="print stats.json to stdout instead of the summary text")]
EntriesOpt = Annotated[bool, typer.Option(
    "--entries", help="keep the per-entry detail (stats.json entry rows, critical path, "
                      "cost-model estimate, the report's timeline) for a program of any size "
                      "(default: up to 10,000 CMDQ entries with the report)")]
TraceOpt = Annotated[bool, typer.Option(
    "--trace/--no-trace", help="also write trace.json (Perfetto; large for big models)")]


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) the informational stderr console."""
    err.quiet = quiet


def print_json(obj: object) -> None:
    """A JSON result on stdout (sorted keys, indent 1)."""
    sys.stdout.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    sys.stdout.flush()


def print_result(stats: dict[str, Any], summary: str, as_json: bool) -> None:
    """The result of a command on stdout: stats.json's text, or the summary text."""
    if as_json:
        sys.stdout.write(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    else:
        sys.stdout.write(summary)
    sys.stdout.flush()
