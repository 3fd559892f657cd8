"""`kernbench sweep SPEC.yaml --out DIR [--workers N] [--ray] [--ray-address ADDRESS]`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kernbench.cli import app
from kernbench.cli.common import err


def _progress(total: int, done: int, quiet: bool) -> Any:
    """A rich progress bar on stderr (points done / failed, ETA); None when stderr is not
    a terminal or with --quiet."""
    if quiet or not sys.stderr.isatty():
        return None
    prog = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=err)
    prog.add_task("points", total=total, completed=done, failed=0)
    return prog


@app.command("sweep")
def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="sweep spec YAML (docs/sweep.md)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")],
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", min=1, help="parallel points (default: the CPU count)")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="run the points as Ray tasks "
                                      "(a local Ray unless --ray-address)")] = False,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray cluster to connect to (implies --ray), e.g. auto or "
                              "ray://head:10001")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="run failed points again (finished ones never re-run)")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
) -> None:
    """Compile and simulate every point of a sweep spec; write results.csv and report.html.

    Finished points (DIR/points/ID) are kept: re-running the same spec resumes."""
    # host.sweep pulls in the compiler and simulator: loaded when the command runs, so
    # that `kernbench --help` stays fast.
    from kernbench.host.sweep import finish_sweep, pending, plan_sweep, run_points

    plan = plan_sweep(spec)  # InputError (exit 2) before any point runs
    n_workers = workers or os.cpu_count() or 1
    use_ray = ray or ray_address is not None
    todo = pending(plan.points, out, retry_failed)
    ids = {p.id for p in plan.points}
    done0 = len(ids) - len(todo)
    if not quiet:
        err.print(f"{len(plan.points)} points ({len(ids)} distinct): {done0} finished, "
                  f"{len(todo)} to run on " + (f"Ray ({ray_address or 'local'})" if use_ray
                                               else f"{n_workers} worker(s)"))
    failed = ran = 0
    prog = _progress(len(ids), done0, quiet)

    def on_result(point: Any, outcome: Any) -> None:
        nonlocal failed, ran
        failed += outcome.status != "ok"
        ran += 1
        if prog is not None:
            prog.update(prog.task_ids[0], advance=1, failed=failed)
        elif not quiet and outcome.status != "ok":
            err.print(f"point {point.index} failed: {outcome.error}")

    interrupted = False
    try:
        if prog is not None:
            prog.start()
        run_points(plan.points, out, workers=n_workers, ray=use_ray, ray_address=ray_address,
                   retry_failed=retry_failed, on_result=on_result)
    except KeyboardInterrupt:
        interrupted = True  # finished points are on disk; write the tables for them
    finally:
        if prog is not None:
            prog.stop()
    table, csv_path, html_path = finish_sweep(plan, out)
    n_err = sum(r["status"] == "error" for r in table.rows)
    n_ok = sum(r["status"] == "ok" for r in table.rows)
    # the result, on stdout (the points' progress went to stderr)
    print(f"{n_ok} ok, {n_err} failed, {len(table.rows) - n_ok - n_err} pending "
          f"({ran} ran now) → {csv_path}, {html_path}", flush=True)
    if interrupted:
        raise typer.Exit(130)
