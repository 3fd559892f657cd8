"""Simulation speed per command: CMDQ entries per CPU second, SimPy events per entry and
compile time, on the cases of issue 38, optionally against a baseline source tree measured
in the same run (the machine is shared: compare ratios, not absolute seconds).

    .venv/bin/python benchmarks/sim_speed.py                      # every case, this tree
    .venv/bin/python benchmarks/sim_speed.py --cases g2s-prefill,stack
    .venv/bin/python benchmarks/sim_speed.py --baseline /path/to/old/src --repeat 2

Every case runs in its own process (so that imports and caches are the same for both
trees), with the event loop (`GrantingEnvironment.run`) wrapped to take their CPU time
and the number of SimPy events scheduled. The GPT-2-small
cases (d 768, 12 layers, 12 heads, vocab 2048, as benchmarks/compile_simulate.py) are
compiled to a bundle (`compile_model`, compile CPU s) and then simulated from it
(`simulate_bundle`, timing only); the Llama cases are one `kernbench run` (compiled layer
by layer while it simulates, so compile time is inside the total, not a column of its
own). Columns: entries simulated, SimPy events per entry, compile CPU s, simulate CPU s
(GPT-2: `simulate_bundle` whole, parse + validate + run + stats; Llama: the total, with
the CPU of the child process a compile ahead forks, ADR-1230; its wall s is printed on
stderr), event
loop CPU s (`GrantingEnvironment.run`, which lowers entries as the Control FSM fetches them),
entries per simulate CPU s, total CPU s, data pass CPU s.
`g2s-prefill-verify` is the GPT-2-small prefill compiled the same way and simulated with
`--verify` (timing pass, data pass, verification against the interpreter and
onnxruntime): its "data pass CPU s" is `DataExecutor.run` (pass 2, ADR-0020) alone, its
simulate CPU s all of `simulate_bundle`.
`stack` is benchmarks/sim_throughput.py's pair measured in one process: the full PE
component stack against a bare 3-process SimPy Store pipeline, as stage operations per
second of each event loop (setup not timed in either) and the ratio bare / stack. With `--baseline`, each case runs alternately on the
baseline tree and on this one, best of `--repeat`, and the table adds old / new ratios.
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
CFG = ROOT / "tests" / "hf_configs"

#: case name → build_gpt2 arguments (compiled to a bundle, then simulated: issue 38's
#: method, benchmarks/compile_simulate.py's GPT-2-small) or `kernbench run` arguments
GPT2 = {"g2s-prefill": {"n_layer": 12, "d": 768, "heads": 12, "seq": 128, "vocab": 2048},
        "g2s-decode": {"n_layer": 12, "d": 768, "heads": 12, "seq": 1, "kv_len": 1024,
                       "vocab": 2048}}
#: GPT-2 cases simulated with the data pass and verification (`--verify`)
GPT2["g2s-prefill-verify"] = GPT2["g2s-prefill"]
VERIFY = {"g2s-prefill-verify"}
CASES: dict[str, list[str]] = {
    "llama8b-prefill": [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048"],
    "llama8b-prefill-exact": [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048",
                              "--exact"],
    # serve's most common program: one decode step (4 of 32 blocks simulated, replayed)
    "llama8b-decode": [str(CFG / "llama-3-8b"), "-t", "large", "--batch", "1", "--seq-len",
                       "1", "--kv-len", "512"],
}
LABELS = {"g2s-prefill": "gpt2-small prefill 128, base",
          "g2s-decode": "gpt2-small decode kv 1024, base",
          "g2s-prefill-verify": "gpt2-small prefill 128, base, --verify",
          "llama8b-prefill": "Llama-3-8B prefill 2048, large (replayed)",
          "llama8b-prefill-exact": "Llama-3-8B prefill 2048, large, --exact",
          "llama8b-decode": "Llama-3-8B decode batch 1 kv 512, large (replayed)",
          "stack": "component stack vs bare SimPy"}


def _events(env) -> int:  # noqa: ANN001
    """SimPy events scheduled so far (the environment's event-id counter, read by repr)."""
    return int(repr(env._eid)[6:-1])


def worker(case: str) -> dict:
    """Run `case` in this process; its measurements (with the console script's garbage
    collector settings, when the tree has them)."""
    import kernbench.cli as cli

    if hasattr(cli, "tune_gc"):
        cli.tune_gc()
    if hasattr(cli, "tune_heap"):
        cli.tune_heap()
    if case == "stack":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from sim_throughput import bare_pipeline, component_stack

        bare = max(n / dt for n, dt in (bare_pipeline(20000) for _ in range(2)))
        stack = max(n / dt for n, dt in (component_stack(20000, False) for _ in range(2)))
        return {"bare_ops_s": bare, "stack_ops_s": stack, "ratio": bare / stack}
    try:  # the event loop: its own module since ADR-1320 (Simulator may run compiled)
        from kernbench.components.environment import GrantingEnvironment
    except ImportError:  # an older tree (--baseline)
        from kernbench.components.arbiter import GrantingEnvironment
    from kernbench.sim_engine.executor import DataExecutor

    acc = {"sim_cpu": 0.0, "events": 0, "compile_cpu": 0.0, "data_cpu": 0.0}
    run0, data0 = GrantingEnvironment.run, DataExecutor.run

    def data_run(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        c0 = time.process_time()
        try:
            return data0(self, *a, **kw)
        finally:
            acc["data_cpu"] += time.process_time() - c0

    DataExecutor.run = data_run

    def run(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        c0, e0 = time.process_time(), _events(self)
        try:
            return run0(self, *a, **kw)
        finally:
            acc["sim_cpu"] += time.process_time() - c0
            acc["events"] += _events(self) - e0

    GrantingEnvironment.run = run
    with tempfile.TemporaryDirectory() as tmp:
        if case in GPT2:
            stats, total = _compile_then_simulate(GPT2[case], Path(tmp), acc, case in VERIFY)
        else:
            import resource

            from kernbench.cli import main

            def children() -> float:  # CPU s of reaped child processes (a compile ahead)
                ru = resource.getrusage(resource.RUSAGE_CHILDREN)
                return ru.ru_utime + ru.ru_stime

            c0, k0, w0 = time.process_time(), children(), time.perf_counter()
            code = main(["run", *CASES[case], "--no-trace", "--no-report", "-o", tmp])
            total = time.process_time() - c0 + children() - k0
            acc["wall"] = time.perf_counter() - w0
            if code != 0:
                raise SystemExit(f"{case}: kernbench run exited {code}")
            stats = json.loads((Path(tmp) / "stats.json").read_text())
    entries = stats.get("entry_count", len(stats.get("entries", {})))
    return {"entries": entries, "events": acc["events"], "compile_cpu": acc["compile_cpu"],
            "simulate_cpu": acc.get("simulate_cpu", total), "sim_cpu": acc["sim_cpu"],
            "total_cpu": total, "total_ns": stats["total_ns"], "data_cpu": acc["data_cpu"],
            "wall": acc.get("wall")}


def _compile_then_simulate(kw: dict, tmp: Path, acc: dict, verify: bool = False
                           ) -> tuple[dict, float]:  # fmt: skip
    """A GPT-2 ONNX model of `kw` compiled to a bundle on `base`, then simulated (timing
    only, or with the data pass and verification: `verify`; no trace, no report);
    (stats, CPU s of both)."""
    import onnx

    from kernbench.host.flow import TIMING_ONLY, SimOptions, compile_model, simulate_bundle
    from kernbench.models.builders import build_gpt2
    from kernbench.topology import load_topology

    topo = load_topology("base")
    model = tmp / "model.onnx"
    onnx.save(build_gpt2(**kw), str(model))
    c0 = time.process_time()
    compile_model(model, topo, tmp / "bundle")
    c1 = time.process_time()
    opts = SimOptions(verify=True, trace=False, report=False) if verify else TIMING_ONLY
    res = simulate_bundle(tmp / "bundle", topo, tmp / "out", opts)
    c2 = time.process_time()
    acc["compile_cpu"] = c1 - c0
    acc["simulate_cpu"] = c2 - c1
    return res.stats, c2 - c0


def measure(case: str, src: str | None) -> dict:
    """`case` in a fresh process, on the tree `src` (None: this one)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    out = subprocess.run([sys.executable, __file__, "--worker", case], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{case} failed ({src or 'this tree'}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _best(rows: list[dict]) -> dict:
    key = "ratio" if "ratio" in rows[0] else "total_cpu"
    return min(rows, key=lambda r: r[key])


def _line(name: str, r: dict) -> str:
    if "ratio" in r:
        return (f"| {name} | stage ops/s: bare {r['bare_ops_s']:,.0f}, stack "
                f"{r['stack_ops_s']:,.0f} | bare / stack {r['ratio']:.2f} |")
    n = r["entries"] or 1
    return (f"| {name} | {r['entries']:,} | {r['events'] / n:.1f} | {r['compile_cpu']:.1f} | "
            f"{r['simulate_cpu']:.1f} | {r['sim_cpu']:.1f} | "
            f"{r['entries'] / r['simulate_cpu']:,.0f} | {r['total_cpu']:.1f} | "
            f"{_data(r)} |")


def _data(r: dict) -> str:
    """The data pass CPU s of a row (– for a timing-only case)."""
    return f"{r['data_cpu']:.1f}" if r.get("data_cpu") else "–"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join([*GPT2, *CASES, "stack"]))
    ap.add_argument("--baseline", help="a source tree (its src/) to measure alongside")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker)))
        return
    print("| case | entries | SimPy events / entry | compile CPU s | simulate CPU s | "
          "event loop CPU s | entries / simulate CPU s | total CPU s | data pass CPU s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in a.cases.split(","):
        trees = [("before", a.baseline), ("now", None)] if a.baseline else [("now", None)]
        runs: dict[str, list[dict]] = {t: [] for t, _ in trees}
        for _ in range(a.repeat):
            for tag, src in trees:
                runs[tag].append(measure(case, src))
        best = {t: _best(rs) for t, rs in runs.items()}
        for tag, _ in trees:
            print(_line(f"{LABELS[case]} ({tag})" if a.baseline else LABELS[case], best[tag]),
                  flush=True)
            if best[tag].get("wall") is not None:
                print(f"{LABELS[case]} ({tag}): {best[tag]['wall']:.1f} s wall",
                      file=sys.stderr, flush=True)
        if a.baseline and "ratio" not in best["now"]:
            o, n = best["before"], best["now"]
            same = ("same" if o["total_ns"] == n["total_ns"] else
                    f"{o['total_ns']:,.0f} → {n['total_ns']:,.0f}")
            comp = (f"{o['compile_cpu'] / n['compile_cpu']:.2f}" if n["compile_cpu"] else "")
            print(f"| {LABELS[case]}: before / now | {same} simulated ns | "
                  f"{o['events'] / max(1, n['events']):.2f} | {comp} | "
                  f"{o['simulate_cpu'] / n['simulate_cpu']:.2f} | "
                  f"{o['sim_cpu'] / n['sim_cpu']:.2f} | | "
                  f"{o['total_cpu'] / n['total_cpu']:.2f} | "
                  f"{_ratio(o, n, 'data_cpu')} |", flush=True)


def _ratio(o: dict, n: dict, key: str) -> str:
    """old / new of `key`, when both rows have it."""
    return f"{o[key] / n[key]:.2f}" if o.get(key) and n.get(key) else ""


if __name__ == "__main__":
    main()
