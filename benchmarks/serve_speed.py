"""Serving speed: `kernbench serve` of many Llama-3-8B requests on `large`.

    .venv/bin/python benchmarks/serve_speed.py [--requests 10000] [--cache FILE]

Three runs, each `kernbench serve --workers 2` (--workers; `--workers auto` leaves the
option out, serve's default) in its own process (CPU time
and peak RSS from os.wait4: the serve process and its workers, CPU summed, RSS the
largest of them), sharing one step cache (--step-cache):
1. saturation: 1000 requests arriving within a millisecond; its requests/s is the
   capacity of the policy on this workload;
2. the load run: --requests at 80 % of that capacity, cold for the programs the
   saturation run did not need;
3. the same load run again, warm: every program from the step cache (the loop alone).
Prints a markdown table on stdout (docs/performance.md).

    .venv/bin/python benchmarks/serve_speed.py --loop-only

measures the serving loop alone on the same workload: the model's facts and the KV cache
come from Llama-3-8B on `large`, but each program's time is a roofline stand-in (weights
and cached KV bytes over the HBM bandwidth, MACs over the int8 peak) instead of a
simulation, so the figure is what the loop, the statistics and the files cost once every
program is in the step cache (in-process: CPU s and peak RSS of this process).

    .venv/bin/python benchmarks/serve_speed.py --estimate [--samples FILE]

estimates a cold run without running it. Real programs are simulated for a sample of
shapes (decode at batch 1, 2, 4, 8, 16, 24, 32 with 512 past tokens and at batch 16 with
1024, the prefill of the prompt), each in this process, its CPU s measured. Then the loop
runs (saturation, then 80 % of its capacity) twice: with the roofline stand-in times and
with a surrogate of the sampled programs (decode: linear in batch between the samples,
plus the batch-16 slope in past tokens scaled by batch/16; prefill: the sampled prefill
scaled by tokens), listing the load run's program shapes under serve's bucket rule. Each
shape is charged the sampled CPU s of its batch (linear between samples; a prefill the
prefill's): one process, and `--workers 2` on two idle cores (the programs serve
simulates side by side, longest first onto the less loaded worker). The shapes of a real
run differ from both lists (the simulator's times bend elsewhere), so the figures are an
extrapolation, stated as one. `--samples FILE` keeps the samples (JSON) across runs;
decode samples at 512 past tokens of other batches found in it (`--batch-profile FILE`:
the samples of `serve_programs.py --batch 512`) join the surrogate, which then follows the
simulator's times at every batch sampled.
`--replay-blocks N` samples programs simulating N decoder blocks before block replay
instead of 4, `--per-octave B,S,K` lists shapes under another grid of edges (ADR-1150).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "hf_configs" / "llama-3-8b"
KB = Path(sys.executable).with_name("kernbench")


def serve(args: list[str], out: Path) -> dict:
    cmd = [str(KB), "serve", str(MODEL), "-t", "large", "--out", str(out), "--quiet", *args]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    stats = json.loads((out / "stats.json").read_text())["serve"]
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "rss_mb": ru.ru_maxrss / 1024, "stats": stats}


def loop_only(requests: int, prompt: str, output: str, max_batch: int,
              quiet: bool = False, order: list | None = None,
              time_of: object = None, per_octave: tuple[int, int, int] | None = None
              ) -> tuple[set[tuple[int, int, int]], float]:
    """The loop with stand-in times (see the module docstring); returns the program shapes
    of the load run and its rate. `order`: when given, gets the load run's simulations in
    the order serve --workers N runs them (a list of shapes simulated together, one list
    each time); `time_of(shape)`: program times instead of the roofline stand-in."""
    import resource

    from kernbench.host.serve.engine import serve_requests
    from kernbench.host.serve.kv_cache import PagedKvCache, capacity_blocks
    from kernbench.host.serve.model import ServedModel
    from kernbench.host.serve.policies import Limits, policy_for
    from kernbench.host.serve.results import serve_stats
    from kernbench.host.serve.run import write_outputs
    from kernbench.host.serve.steps import StepTimer
    from kernbench.host.serve.workload import LengthSpec, poisson_requests
    from kernbench.topology import load_topology
    from kernbench.topology.peaks import peak_figures

    topo = load_topology("large")
    peaks = peak_figures(topo)
    with tempfile.TemporaryDirectory() as d:
        m = ServedModel.open(MODEL, None, Path(d))
        blocks = capacity_blocks(topo.hbm_bytes, m.weight_bytes, m.kv_bytes_per_token, 16, 0.9)
        params = m.weight_bytes  # int8 weights: one byte a parameter

        def stand_in(shape: tuple[int, int, int]) -> float:
            b, s, k = shape
            read = m.weight_bytes + b * (k + s) * m.kv_bytes_per_token
            return max(read / peaks.hbm_gbs, b * s * params / peaks.macs_per_ns[8])

        program = time_of or stand_in

        p, o = LengthSpec.parse(prompt, "p"), LengthSpec.parse(output, "o")

        def run(n: int, rate: float) -> tuple:
            reqs = poisson_requests(n, rate, p, o, 0)
            if order is None or n != requests:
                timer = StepTimer(program, per_octave=per_octave)
            else:
                def one(shape: tuple[int, int, int]) -> float:
                    order.append([shape])
                    return program(shape)

                def many(shapes: list) -> list:
                    order.append(list(shapes))
                    return [(program(x), 0.0) for x in shapes]

                timer = StepTimer(one, simulate_many=many, per_octave=per_octave)
            res = serve_requests(reqs, policy_for("continuous", Limits(max_batch, 8192)),
                                 PagedKvCache(blocks, 16), timer)
            return res, timer

        sat, _ = run(1000, 1e6)
        cap = serve_stats(sat, {}, blocks)["throughput"]["requests_per_s"]
        t0, c0 = time.perf_counter(), time.process_time()
        res, timer = run(requests, 0.8 * cap)
        stats = {"serve": {"results": serve_stats(res, {}, blocks), "model": m.name,
                           "topology": "large", "policy": "continuous",
                           "workload": {"describe": f"{requests} requests"},
                           "kv_cache": {"blocks": blocks},
                           "steps": {"count": timer.steps, "programs": len(timer.programs),
                                     "exact": False}}}
        write_outputs(Path(d) / "out", res, stats)  # the files `serve` writes
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    r = stats["serve"]["results"]
    if quiet:
        return set(timer.programs), 0.8 * cap
    print(f"loop only: {requests} requests at {0.8 * cap:.3f}/s (80 % of {cap:.3f}), "
          f"{timer.steps:,} steps, {len(timer.programs)} program shapes: wall {wall:.1f} s, "
          f"CPU {cpu:.1f} s, peak RSS {rss:.0f} MB; TTFT p99 {1e3 * r['ttft_s']['p99']:.1f} ms")
    return set(timer.programs), 0.8 * cap


SAMPLE_BATCHES = (1, 2, 4, 8, 16, 24, 32)


def estimate(requests: int, prompt: str, output: str, max_batch: int,
             samples: Path | None, replay_blocks: int | None = None,
             per_octave: tuple[int, int, int] | None = None,
             batch_profile: Path | None = None) -> None:
    from kernbench.host.block_replay import SIMULATED_BLOCKS
    from kernbench.host.serve.model import ServedModel
    from kernbench.topology import load_topology

    got: dict[str, dict[str, float]] = {}
    if samples is not None and samples.is_file():
        got = json.loads(samples.read_text())
    if batch_profile is not None:
        blocks = replay_blocks or SIMULATED_BLOCKS
        for key, v in json.loads(batch_profile.read_text()).items():
            shape, _, n = key.partition("@")
            if int(n) == blocks and shape.endswith(",1,512"):
                got.setdefault(shape, {"ns": v["ns"], "cpu_s": v["cpu_s"]})
    p = int(prompt)
    want = [(b, 1, 512) for b in SAMPLE_BATCHES] + [(16, 1, 1024), (1, p, 0)]
    topo = load_topology("large")
    with tempfile.TemporaryDirectory() as d:
        m = ServedModel.open(MODEL, None, Path(d), replay_blocks or SIMULATED_BLOCKS)
        for shape in want:
            key = ",".join(map(str, shape))
            if key not in got:
                c0 = time.process_time()
                ns = m.simulate(shape, topo)
                got[key] = {"ns": ns, "cpu_s": round(time.process_time() - c0, 2)}
                if samples is not None:
                    samples.write_text(json.dumps(got, indent=1) + "\n")
    print("| sampled program (batch, new, past) | simulated ms | CPU s |\n| --- | ---: | ---: |")
    for shape in want:
        g = got[",".join(map(str, shape))]
        print(f"| {shape} | {g['ns'] / 1e6:.3f} | {g['cpu_s']:.1f} |")
    # every decode sample at 512 past tokens in the file counts (serve_programs.py --batch
    # simulates each batch 1..32: the surrogate then follows the simulator's bends in batch)
    by_batch = sorted((int(k.split(",")[0]), v) for k, v in got.items()
                      if k.endswith(",1,512") and k.count(",") == 2)

    def between(b: int, key: str) -> float:
        lo = max((x for x in by_batch if x[0] <= b), default=by_batch[0])
        hi = min((x for x in by_batch if x[0] >= b), default=by_batch[-1])
        if hi[0] == lo[0]:
            return lo[1][key]
        return lo[1][key] + (hi[1][key] - lo[1][key]) * (b - lo[0]) / (hi[0] - lo[0])

    pre = got[f"1,{p},0"]
    slope16 = (got["16,1,1024"]["ns"] - got["16,1,512"]["ns"]) / 512

    def surrogate(shape: tuple[int, int, int]) -> float:
        b, s, k = shape
        if s > 1:
            return pre["ns"] * b * s / p
        return between(b, "ns") + (k - 512) * slope16 * b / 16

    def cpu(shape: tuple[int, int, int]) -> float:
        return pre["cpu_s"] if shape[1] > 1 else between(shape[0], "cpu_s")

    print("\n| program times of the loop | load run's rate /s | program shapes | "
          "programs' CPU s (one process) | wall on two idle cores with --workers 2 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, fn in (("roofline stand-in", None), ("surrogate of the samples", surrogate)):
        order: list[list[tuple[int, int, int]]] = []
        shapes, rate = loop_only(requests, prompt, output, max_batch, True, order, fn,
                                 per_octave)
        wall2 = 0.0
        for batch in order:
            loads = [0.0, 0.0]
            for c in sorted(map(cpu, batch), reverse=True):
                loads[loads.index(min(loads))] += c
            wall2 += max(loads)
        print(f"| {name} | {rate:.2f} | {len(shapes)} | {sum(map(cpu, shapes)):.0f} | "
              f"{wall2:.0f} s ({len(order)} rounds) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--prompt-len", default="512")
    ap.add_argument("--output-len", default="128")
    ap.add_argument("--max-batch", default="32")
    ap.add_argument("--cache", type=Path, default=None, help="step cache file to keep")
    ap.add_argument("--workers", default="2", help="serve --workers (programs side by side); "
                    "auto: the option left out, serve's own default")
    ap.add_argument("--loop-only", action="store_true", help="the loop alone (see above)")
    ap.add_argument("--estimate", action="store_true", help="extrapolate a cold run (above)")
    ap.add_argument("--samples", type=Path, default=None, help="--estimate: sampled costs")
    ap.add_argument("--batch-profile", type=Path, default=None,
                    help="--estimate: samples of serve_programs.py --batch 512 to add")
    ap.add_argument("--replay-blocks", type=int, default=None,
                    help="--estimate: decoder blocks each sampled program simulates "
                         "before block replay (default: run's and serve's, 4)")
    ap.add_argument("--per-octave", default=None,
                    help="--estimate: B,S,K edges an octave of batch, new and past tokens "
                         "instead of serve's rule (ADR-1150)")
    a = ap.parse_args()
    if a.estimate:
        rule = tuple(int(x) for x in a.per_octave.split(",")) if a.per_octave else None
        estimate(a.requests, a.prompt_len, a.output_len, int(a.max_batch), a.samples,
                 a.replay_blocks, rule, a.batch_profile)  # type: ignore[arg-type]
        return
    if a.loop_only:
        loop_only(a.requests, a.prompt_len, a.output_len, int(a.max_batch))
        return
    work = ["--prompt-len", a.prompt_len, "--output-len", a.output_len,
            "--max-batch", a.max_batch, "--policy", "continuous", "--seed", "0",
            *(["--workers", a.workers] if a.workers != "auto" else [])]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cache = a.cache or tmp / "steps.json"
        sat = serve([*work, "--requests", "1000", "--rate", "1e6", "--step-cache", str(cache)],
                    tmp / "sat")
        cap = sat["stats"]["results"]["throughput"]["requests_per_s"]
        rate = f"{0.8 * cap:.6g}"
        load = [*work, "--requests", str(a.requests), "--rate", rate,
                "--step-cache", str(cache), "--slo", "ttft=1s,tpot=50ms"]
        cold = serve(load, tmp / "cold")
        warm = serve(load, tmp / "warm")
    print(f"capacity {cap:.3f} requests/s; load run at {rate} requests/s "
          f"({' '.join(work)})\n")
    print("| run | requests | steps | programs (simulated now) | wall s | CPU s | peak RSS MB |"
          " TTFT p50 / p99 ms | TPOT p50 / p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in (("saturation (1000 at once)", sat), ("80 % load, cold", cold),
                    ("80 % load, warm step cache", warm)):
        s = r["stats"]
        res = s["results"]
        print(f"| {name} | {res['requests']} | {s['steps']['count']:,} | "
              f"{s['steps']['programs']} ({s['steps']['programs_simulated']}) | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
              f"{r['rss_mb']:.0f} | {1e3 * res['ttft_s']['p50']:.1f} / "
              f"{1e3 * res['ttft_s']['p99']:.1f} | {1e3 * res['tpot_s']['p50']:.2f} / "
              f"{1e3 * res['tpot_s']['p99']:.2f} |")


if __name__ == "__main__":
    main()
