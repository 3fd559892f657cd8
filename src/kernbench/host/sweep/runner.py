"""Run a sweep's points: in this process, on a local process pool, or as Ray tasks.

A worker (`run_point`) compiles and simulates one point in a scratch folder and returns
its stats.json text; it never raises for a point that fails (the error line is the
result). Only the driver writes DIR/points/ID/, each file atomically (a temporary file in
the same folder renamed over the target), as each result arrives: a sweep killed at any
moment loses no finished point, and workers on other machines (Ray) need no shared disk.

A point is finished when DIR/points/ID/stats.json (ok) or error.json (failed) exists; a
re-run skips finished points (failed ones too, unless retry_failed) and runs each
distinct ID once even if several grid combinations resolve to it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import onnx

from kernbench.common.tuning import tune_process
from kernbench.config import TopologyConfig
from kernbench.errors import InputError, KernbenchError
from kernbench.host.flow import (
    TIMING_ONLY,
    CompileRequest,
    compile_model,
    program_of,
    simulate_bundle,
)
from kernbench.host.sweep.points import Point, spec_key
from kernbench.models.builders import model_for
from kernbench.topology import build_topology

RAY_MISSING = "Ray is not installed; install it with: pip install 'kernbench[sweep]'"


@dataclass(frozen=True)
class Outcome:
    """What a worker returns for one point: `stats` is the stats.json text when ok."""

    id: str
    status: str  # "ok" | "error"
    error: str | None = None
    stats: str | None = None


OnResult = Callable[[Point, Outcome], None]


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _model_file(point: Point, tmp: Path) -> Path:
    if not point.builtin:
        return Path(point.model_ref)
    path = tmp / f"{point.model_ref}_seq{point.seq_len}_kv{point.kv_len}.onnx"
    onnx.save(model_for(point.model_ref, seq_len=point.seq_len, kv_len=point.kv_len), str(path))
    return path


def _qconfig_file(point: Point, tmp: Path) -> Path | None:
    if point.qconfig is None:
        return None
    path = tmp / "qconfig.json"  # JSON is YAML: load_qconfig reads it as written
    path.write_text(json.dumps(point.qconfig), encoding="utf-8")
    return path


def run_point(point: Point) -> Outcome:
    """Compile + simulate one point (no trace, no report); the error line if it fails."""
    if point.error is not None:
        return Outcome(point.id, "error", point.error)
    tune_process()  # a spawned worker or a Ray task starts with Python's defaults
    try:
        with tempfile.TemporaryDirectory(prefix="kernbench-sweep-") as d:
            tmp = Path(d)
            topo = build_topology(TopologyConfig.model_validate(point.topology))
            if point.serve is not None:
                return Outcome(point.id, "ok", stats=_serve_point(point, topo, tmp))
            # timing only: the program goes to the simulator in memory, as in `kernbench
            # run`, and the scratch bundle holds neither cmdq.json nor the weights
            state, _ = compile_model(_model_file(point, tmp), topo, tmp / "bundle",
                                     CompileRequest(qconfig=_qconfig_file(point, tmp),
                                                    write_cmdq=False, write_weights=False))
            simulate_bundle(tmp / "bundle", topo, tmp / "sim", TIMING_ONLY,
                            prog=program_of(state, str(tmp / "bundle" / "cmdq.json")))
            return Outcome(point.id, "ok", stats=(tmp / "sim" / "stats.json").read_text(
                encoding="utf-8"))
    except KernbenchError as e:
        return Outcome(point.id, "error", _one_line(str(e)))
    except Exception as e:  # a bug: recorded like any failure, the sweep goes on
        return Outcome(point.id, "error", _one_line(f"internal error: {type(e).__name__}: {e}"))


def _serve_point(point: Point, topo: object, tmp: Path) -> str:
    """A load-sweep point: `kernbench serve` of the point's options; its stats.json text."""
    from kernbench.host.serve import ServeOptions, serve

    opts = ServeOptions(**point.serve, qconfig=_qconfig_file(point, tmp),  # type: ignore[arg-type]
                        step_cache=Path(point.step_cache) if point.step_cache else None)
    try:
        serve(Path(point.model_ref), topo, tmp / "serve", opts, tmp, note=lambda *a: None)
    except InputError as e:  # named as the spec names it: serve.kv_blocks, not --kv-blocks
        raise InputError(e.reason, file=e.file, where=e.where,
                         field=spec_key(e.field) if e.field else None) from None
    return (tmp / "serve" / "stats.json").read_text(encoding="utf-8")


# ----------------------------------------------------------------------- the points dir
def point_dir(out: Path, pid: str) -> Path:
    return Path(out) / "points" / pid


def write_atomic(path: Path, text: str) -> None:
    """Write text so that `path` is either absent or complete, never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def is_finished(out: Path, pid: str, retry_failed: bool = False) -> bool:
    d = point_dir(out, pid)
    return (d / "stats.json").is_file() or (not retry_failed and (d / "error.json").is_file())


def store(out: Path, point: Point, outcome: Outcome) -> None:
    """Record a point's result: point.json, then stats.json (ok) or error.json (failed)."""
    d = point_dir(out, point.id)
    write_atomic(d / "point.json", json.dumps(point.describe(), indent=2, sort_keys=True) + "\n")
    if outcome.status == "ok":
        write_atomic(d / "stats.json", outcome.stats or "")
        (d / "error.json").unlink(missing_ok=True)
    else:
        write_atomic(d / "error.json", json.dumps({"error": outcome.error}, indent=2) + "\n")


def pending(points: list[Point], out: Path, retry_failed: bool = False) -> list[Point]:
    """The points still to run: unfinished, one per distinct ID, in spec order."""
    seen: set[str] = set()
    todo = []
    for p in points:
        if p.id not in seen and not is_finished(out, p.id, retry_failed):
            todo.append(p)
        seen.add(p.id)
    return todo


# ------------------------------------------------------------------------- executors
def run_local(todo: list[Point], workers: int, on_result: OnResult) -> None:
    """Run in this process (workers == 1) or on a spawn-context process pool."""
    if workers <= 1 or len(todo) <= 1:
        for p in todo:
            on_result(p, run_point(p))
        return
    # spawn: a clean interpreter per worker (no forked SimPy/numpy state, works on macOS)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=ctx) as pool:
        futures = {pool.submit(run_point, p): p for p in todo}
        try:
            for fut in as_completed(futures):
                p = futures[fut]
                try:
                    outcome = fut.result()
                except Exception as e:  # the worker process died (killed, out of memory)
                    outcome = Outcome(p.id, "error", _one_line(f"worker failed: {e!r}"))
                on_result(p, outcome)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_ray(todo: list[Point], address: str | None, workers: int, on_result: OnResult) -> None:
    """Run the points as Ray tasks: on the cluster at `address`, or on a local Ray started
    with `workers` CPUs. Ray is shut down afterwards if this call started it."""
    try:
        import ray  # optional extra (kernbench[sweep]): only --ray needs it
    except ImportError:
        raise InputError(RAY_MISSING) from None
    started = not ray.is_initialized()
    if started:
        if address:
            try:
                ray.init(address=address, log_to_driver=False)
            except Exception as e:  # unreachable or not a Ray cluster: the user's address
                raise InputError(f"cannot connect: {_one_line(str(e))}", file="--ray-address",
                                 where=address) from None
        else:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1)(run_point)
        refs = {task.remote(p): p for p in todo}
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            p = refs[done[0]]
            try:
                outcome = ray.get(done[0])
            except Exception as e:  # the task's worker died or the node was lost
                outcome = Outcome(p.id, "error", _one_line(f"ray task failed: {e}"))
            on_result(p, outcome)
    finally:
        if started:
            ray.shutdown()


def run_points(points: list[Point], out: Path, *, workers: int, ray: bool = False,
               ray_address: str | None = None, retry_failed: bool = False,
               on_result: OnResult | None = None) -> list[Point]:
    """Run every unfinished point and store each result as it arrives; returns the points
    that ran. `on_result` (e.g. a progress bar) is called after each is stored."""
    todo = pending(points, out, retry_failed)

    def record(p: Point, outcome: Outcome) -> None:
        store(out, p, outcome)
        if on_result is not None:
            on_result(p, outcome)

    if ray:
        run_ray(todo, ray_address, workers, record)
    else:
        run_local(todo, workers, record)
    return todo
