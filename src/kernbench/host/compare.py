"""`kernbench compare A B`: the two sides, read or simulated, then report.compare.

A side is either a stats.json written by kernbench (a `.json` file, or a folder holding
`stats.json`) or a topology (a preset name or a topology YAML) on which `model` is compiled
and simulated the way `kernbench run --no-report` does (timing only, with the LLM figures
of a model with attention). Both sides must be of one sort: two stats files, or two
topologies with a model. Anything else is one InputError line (exit 2).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology


def _stats_file(side: str) -> Path | None:
    """The stats.json `side` names, or None when it names no stats file."""
    p = Path(side)
    if p.is_dir() and (p / "stats.json").is_file():
        return p / "stats.json"
    if p.suffix == ".json":
        return p
    return None


def load_stats(path: Path) -> dict[str, Any]:
    """A stats.json document; refused (InputError) unless it is a kernbench run's."""
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    try:
        doc = json.loads(read_input_text(path, MAX_JSON_BYTES))
    except ValueError as e:
        raise InputError(f"not JSON: {e}", file=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("total_ns"), (int, float)):
        raise InputError("not a kernbench stats.json (no total_ns)", file=str(path))
    return doc


def simulate_on(model: Path, topology: str, shapes: ShapeOptions, qconfig: Path | None,
                note: Callable[[str], None]) -> dict[str, Any]:
    """stats of `model` compiled and simulated on `topology` (timing only)."""
    topo = load_topology(topology)
    note(f"running {model} on '{topo.name}'")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        res = resolve_model(model, shapes, tmp / "model", qconfig)
        opts = RunOptions(qconfig=qconfig, trace=False, report=False, write_cmdq=False,
                          write_weights=False,
                          llm=True, bundle=tmp / "bundle")
        return run_model(res.path, topo, tmp / "out", opts, RunHooks(note=note)).stats


def compare_sides(a: str, b: str, model: Path | None, shapes: ShapeOptions,
                  qconfig: Path | None, note: Callable[[str], None]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stats of sides `a` and `b` (see the module docstring)."""
    fa, fb = _stats_file(a), _stats_file(b)
    if fa is not None and fb is not None:
        if model is not None or shapes.given() or qconfig is not None:
            raise InputError("--model, --qconfig and the shape options apply to two "
                             "topologies, not to two stats.json files", field="--model")
        return load_stats(fa), load_stats(fb)
    if fa is not None or fb is not None:
        stats_side, other = (a, b) if fa is not None else (b, a)
        raise InputError(f"'{stats_side}' is a stats file and '{other}' is not: give two "
                         "stats.json files, or two presets (or topology YAMLs) with --model",
                         file=other)
    if model is None:
        raise InputError("two topologies are compared on a model: add --model MODEL "
                         "(e.g. --model gpt2)", field="--model")
    return (simulate_on(model, a, shapes, qconfig, note),
            simulate_on(model, b, shapes, qconfig, note))
