"""Options shared by several commands, and the stderr console."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True)

TopologyOpt = Annotated[
    str, typer.Option("--topology", "-t", help="preset name (small, base) or topology YAML file")
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
