"""How well `kernbench serve --workers N` keeps its workers busy, without simulating.

    .venv/bin/python benchmarks/serve_pool.py --cache FILE [--requests 1000 --rate 1e6]
        [--workers 2|auto] [--step-cache FILE] [--baseline OTHER_TREE/src]

Runs the real serving loop (Llama-3-8B on `large`, prompt 512, output 128, continuous,
--max-batch 32, seed 0: `benchmarks/serve_speed.py`'s workload) with every program's time
read from a warm step cache FILE (one `serve_speed.py --cache FILE` run fills it) and every
simulation replaced by a stand-in costing one unit of CPU. A pool call of k programs on N
workers takes ceil(k / N) units of wall; a program the serve process simulates itself, one.
So the figures count programs, not seconds: wall units, CPU units, and the programs simulated
ahead and never used. They isolate the pool's scheduling (which programs are simulated
ahead, and when) from the simulator's speed; the outputs are those of a real run, since a
program simulated ahead changes no time. A program the cache lacks was never asked for by a
real run of the workload; its stand-in time is never used. `--workers auto` leaves the
option out, as `serve_speed.py --workers auto` does: the pool then starts once the serve
process has simulated `AUTO_START_CPU_S` / 5 programs (a program of this workload takes
about 5 CPU s). `--step-cache FILE` starts from a copy of that step cache, as the load run
of `serve_speed.py` starts from the saturation run's programs. With `--baseline`, the same
runs with another tree's kernbench (a `git archive` of it) in a child process, for a
before/after table from one command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "hf_configs" / "llama-3-8b"
PROGRAM_CPU_S = 5.0  # about what a step program of this workload takes (docs/performance.md)
UNIT_S = 0.01  # CPU s a stand-in simulation in the serve process burns (`--workers auto`)


def emulate(cache: Path, requests: int, rate: float, workers: int | None,
            start: Path | None = None) -> dict:
    """One serving run with the stand-in simulations: its counts (module docstring)."""
    import kernbench.host.serve.run as serve_run
    from kernbench.host.serve.model import ServedModel
    from kernbench.topology import load_topology

    doc = json.loads(cache.read_text())
    times = {(b, s, k): ns for sec in doc["caches"].values() for b, s, k, ns in sec["programs"]}
    count = {"wall": 0, "cpu": 0, "calls": 0, "local": 0}

    class StandInPool:
        def __init__(self, _model: object, _topo: object, n: int) -> None:
            self.n = n

        def simulate_many(self, shapes: list, optional: int = 0) -> list:
            count["wall"] += -(-len(shapes) // self.n)
            count["cpu"] += len(shapes)
            count["calls"] += 1
            return [(times.get(tuple(s), 1e6), 1.0) for s in shapes]

        def __enter__(self) -> StandInPool:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def stand_in(_self: object, shape: tuple, _topo: object) -> float:
        count["wall"] += 1
        count["cpu"] += 1
        count["local"] += 1
        t0 = time.process_time()
        while time.process_time() - t0 < UNIT_S:  # what the auto pool's start counts
            pass
        return times.get(tuple(shape), 1e6)

    saved = serve_run.ProgramPool, ServedModel.simulate, serve_run.AUTO_START_CPU_S
    serve_run.ProgramPool = StandInPool  # type: ignore[misc, assignment]
    ServedModel.simulate = stand_in  # type: ignore[method-assign, assignment]
    serve_run.AUTO_START_CPU_S = UNIT_S * round(saved[2] / PROGRAM_CPU_S) - UNIT_S / 2
    try:
        with tempfile.TemporaryDirectory() as d:
            step_cache = None
            if start is not None:
                step_cache = Path(d) / "steps.json"
                shutil.copy(start, step_cache)
            opts = serve_run.ServeOptions(
                requests=requests, rate=rate, prompt_len="512", output_len="128", seed=0,
                max_batch=32, workers=workers, step_cache=step_cache)
            st = serve_run.serve(MODEL, load_topology("large"), Path(d) / "out", opts,
                                 Path(d), note=lambda _: None)
    finally:
        (serve_run.ProgramPool, ServedModel.simulate,  # type: ignore[misc]
         serve_run.AUTO_START_CPU_S) = saved
    steps = st["serve"]["steps"]
    res = st["serve"]["results"]
    used = steps["programs_simulated"] - count["local"]  # by the pool
    return {**count, "programs": steps["programs"],
            "unused": count["cpu"] - count["local"] - used,
            "tpot_p50_ms": 1e3 * res["tpot_s"]["p50"],
            "ttft_p99_ms": 1e3 * res["ttft_s"]["p99"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True, help="a warm step cache (JSON)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1e6, help="requests/s (1e6: saturation)")
    ap.add_argument("--workers", default="2", help="N, or auto (the option left out)")
    ap.add_argument("--step-cache", type=Path, default=None,
                    help="start from a copy of this step cache (the saturation run's)")
    ap.add_argument("--baseline", type=Path, default=None, help="another tree's src/")
    ap.add_argument("--json", action="store_true", help="one JSON line (for --baseline)")
    a = ap.parse_args()
    rows = []
    if a.baseline is not None:
        cmd = [sys.executable, __file__, "--cache", str(a.cache), "--requests",
               str(a.requests), "--rate", str(a.rate), "--workers", a.workers, "--json",
               *(["--step-cache", str(a.step_cache)] if a.step_cache else [])]
        out = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(a.baseline)}, check=True,
                             capture_output=True, text=True).stdout
        rows.append(("baseline", json.loads(out.splitlines()[-1])))
    workers = None if a.workers == "auto" else int(a.workers)
    here = emulate(a.cache, a.requests, a.rate, workers, a.step_cache)
    if a.json:
        print(json.dumps(here))
        return
    rows.append(("this tree", here))
    print(f"{a.requests} requests at {a.rate:g}/s, --workers {a.workers}; units: programs\n")
    print("| tree | programs asked | pool calls | in the serve process | wall | CPU | "
          "simulated ahead, unused | TPOT p50 ms | TTFT p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in rows:
        print(f"| {name} | {r['programs']} | {r['calls']} | {r['local']} | {r['wall']} | "
              f"{r['cpu']} | {r['unused']} | {r['tpot_p50_ms']:.3f} | {r['ttft_p99_ms']:.1f} |")


if __name__ == "__main__":
    main()
