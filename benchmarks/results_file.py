"""A JSON file of benchmark results kept per case (benchmarks/data/*.json), shared by runs
that may overlap: a case that takes an hour is run once and its row kept.

`record` re-reads the file when a case ends and changes that case's row only, so a second
run that ended meanwhile keeps its rows (reading the file once at the start and writing it
whole at the end put back the rows that run had started with). The file is replaced in one
rename, so a reader never sees it half written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def record(path: Path, name: str, result: dict) -> dict:
    """Set the row `name` of the results file at `path` to `result`; returns every row."""
    results = load(path)
    results[name] = result
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return results
