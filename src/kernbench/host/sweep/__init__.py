"""Sweeps: design-space exploration over topologies, models, qconfigs and shapes.

    plan = plan_sweep(Path("sweep.yaml"))          # validate + expand (InputError on bad spec)
    run_points(plan.points, out, workers=4)        # or ray=True, ray_address="auto"
    table, csv_path, html_path = finish_sweep(plan, out)

spec.py (the YAML model and its JSON Schema) → points.py (expansion, content-hash IDs) →
runner.py (pool / Ray, atomic per-point results) → results.py (results.csv) →
report.py (report.html). docs/sweep.md is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernbench.host.sweep.points import Point, expand, swept_keys
from kernbench.host.sweep.report import write_report
from kernbench.host.sweep.results import Table, build_table, write_csv
from kernbench.host.sweep.runner import RAY_MISSING, Outcome, pending, run_points
from kernbench.host.sweep.spec import SweepSpec, load_spec, schema_text


@dataclass(frozen=True)
class Plan:
    """A validated spec and its points, in spec order."""

    spec_path: Path
    spec: SweepSpec
    points: list[Point]
    swept: list[str]


def plan_sweep(spec_path: Path) -> Plan:
    """Read, validate and expand a spec; raises InputError before anything runs."""
    spec = load_spec(Path(spec_path))
    points = expand(spec, Path(spec_path))
    return Plan(Path(spec_path), spec, points, swept_keys(spec, points))


def finish_sweep(plan: Plan, out: Path) -> tuple[Table, Path, Path]:
    """Write DIR/results.csv and DIR/report.html from what DIR/points holds."""
    table = build_table(plan.points, Path(out), list(plan.spec.grid), plan.swept)
    csv_path = write_csv(table, Path(out) / "results.csv")
    html_path = write_report(table, Path(out) / "report.html",
                             title=f"kernbench sweep: {plan.spec_path.name}")
    return table, csv_path, html_path


__all__ = ["RAY_MISSING", "Outcome", "Plan", "Point", "SweepSpec", "Table", "finish_sweep",
           "pending", "plan_sweep", "run_points", "schema_text"]
