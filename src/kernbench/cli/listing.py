"""`kernbench list [--json]`: what a user may name on the command line — topology presets,
built-in models, and the (kind, impl) pairs of the component registry (built-in and
plug-ins).

The lists are read from their one home (the presets folder, `models.builders.MODELS`, the
component registry), so they cannot drift from what the commands accept. The listing is the
command's result: it goes to stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from kernbench.cli import app


def catalog() -> dict[str, Any]:
    """{"presets": [...], "models": [...], "components": {kind: [impl, ...]}}."""
    from kernbench.components.registry import registered
    from kernbench.config.load import preset_names
    from kernbench.models.builders import MODELS

    components: dict[str, list[str]] = {}
    for kind, impl in registered():
        components.setdefault(kind, []).append(impl)
    return {"presets": preset_names(), "models": list(MODELS), "components": components}


@app.command("list")
def list_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="print the lists as JSON")] = False,
) -> None:
    """List the topology presets, the built-in models and the component kinds and impls."""
    cat = catalog()
    if as_json:
        sys.stdout.write(json.dumps(cat, indent=1, sort_keys=True) + "\n")
        return
    lines = [f"presets: {', '.join(cat['presets'])}",
             f"built-in models: {', '.join(cat['models'])}",
             "components (kind: impls):"]
    lines += [f"  {kind}: {', '.join(impls)}" for kind, impls in sorted(cat["components"].items())]
    sys.stdout.write("\n".join(lines) + "\n")
