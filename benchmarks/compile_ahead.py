"""Compile ahead (ADR-1230): `kernbench run` with the streamed compile in a second process
against `--no-compile-ahead` (one process), the two alternated in one run.

    .venv/bin/python benchmarks/compile_ahead.py [--repeat 2] [--cases NAME,...]

Every run is one `kernbench run ... --no-trace --no-report --exact` in a process of its
own (measured_run.py: wall s, CPU s of the run and its reaped children, peak RSS). Prints
a markdown table on stdout: per case the entries, the best wall and CPU s of each mode,
wall one-process / ahead, and whether the two stats.json are the same (they must be).
Wall seconds are the figure the mode changes; quote them from an otherwise idle machine.

    .venv/bin/python benchmarks/compile_ahead.py --baseline OTHER/src [--repeat 2]

runs each case with compile ahead in this tree and in another (its `src` folder on
PYTHONPATH), alternated, and prints the best wall s and the CPU s of each (the run and its
child), their ratio, and whether the stats.json are the same (ADR-1280).

    .venv/bin/python benchmarks/compile_ahead.py --entry-costs

what the pipe could carry instead, per entry (process CPU µs, the first 20 000 entries of
gpt2-small prefill 128 on `base`): parsing an entry dict into its model, lowering the
model into its Control-FSM entry, sending a dict as JSON (what the pipe carries) and
pickling each across instead (ADR-1230); the collector paused in each timed step.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

from measured_run import measured_run

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "hf_configs"

CASES = {
    "llama8b-prefill": ("Llama-3-8B prefill 2048, large",
                        [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048"]),
    "g2s-prefill": ("gpt2-small prefill 128, base",
                    ["gpt2-small", "-t", "base", "--seq-len", "128"]),
    "qwen7b-decode": ("Qwen2-7B decode b8 kv8192, large",
                      [str(CFG / "qwen2-7b"), "-t", "large", "--batch", "8", "--kv-len",
                       "8192"]),
    "llama8b-tp8-decode": ("Llama-3.1-8B TP=8 decode b32 kv1024, t3k",
                           [str(CFG / "llama-3.1-8b"), "-t", "t3k", "--tp", "8", "--batch",
                            "32", "--kv-len", "1024"]),
}


def entry_costs(n: int = 20_000) -> None:
    """Per-entry CPU µs of parsing, lowering and pickling (module docstring)."""
    import onnx

    from kernbench.cmdq.hw import to_program
    from kernbench.cmdq.io import parse_chunk
    from kernbench.cmdq.schema import CmdqProgram
    from kernbench.host.flow import compile_model
    from kernbench.models.builders import build_gpt2
    from kernbench.topology import load_topology

    topo = load_topology("base")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "g2s.onnx"
        onnx.save(build_gpt2(n_layer=12, d=768, heads=12, seq=128, vocab=2048), str(model))
        compile_model(model, topo, Path(tmp) / "bundle")
        dicts = json.loads((Path(tmp) / "bundle" / "cmdq.json").read_text())["cmdq"][:n]

    def timed(fn):  # noqa: ANN001, ANN202
        gc.collect()
        gc.disable()  # a collection of the whole heap would land in whichever step ran
        t = time.process_time()
        out = fn()
        dt = time.process_time() - t
        gc.enable()
        return out, dt * 1e6 / len(dicts)

    models, parse = timed(lambda: parse_chunk(dicts, 0))
    lowered, lower = timed(lambda: to_program(CmdqProgram.model_construct(cmdq=models), topo))
    j_bytes, j_dump = timed(lambda: json.dumps(dicts, separators=(",", ":")).encode())
    _, j_load = timed(lambda: json.loads(j_bytes))
    d_bytes, d_dump = timed(lambda: pickle.dumps(dicts, pickle.HIGHEST_PROTOCOL))
    _, d_load = timed(lambda: pickle.loads(d_bytes))
    m_bytes, m_dump = timed(lambda: pickle.dumps(models, pickle.HIGHEST_PROTOCOL))
    _, m_load = timed(lambda: pickle.loads(m_bytes))
    l_bytes, l_dump = timed(lambda: pickle.dumps(lowered, pickle.HIGHEST_PROTOCOL))
    _, l_load = timed(lambda: pickle.loads(l_bytes))
    print(f"| per entry ({len(dicts):,} entries) | µs |")
    print("| --- | ---: |")
    for name, us in (("parse a dict into its model", parse), ("lower the model", lower),
                     ("a dict as a line of JSON (what the pipe carries)", j_dump),
                     ("a line of JSON read back", j_load),
                     ("pickle a dict (dump)", d_dump), ("unpickle a dict", d_load),
                     ("pickle a parsed model (dump)", m_dump),
                     ("unpickle a parsed model", m_load),
                     ("pickle a lowered entry (dump)", l_dump),
                     ("unpickle a lowered entry", l_load)):
        print(f"| {name} | {us:.1f} |")


def against(names: list[str], baseline: str, repeat: int) -> None:
    """Each case in this tree and in `baseline` (a src folder), compiling ahead, alternated."""
    print("| case | entries | wall s | baseline wall s | baseline / this | CPU s | "
          "baseline CPU s | same stats |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    here = str(ROOT / "src")
    for name in names:
        label, args = CASES[name]
        base = [*args, "--exact", "--no-trace", "--no-report"]
        runs: dict[str, list[dict]] = {here: [], baseline: []}
        for _ in range(repeat):
            for src in (baseline, here):
                runs[src].append(measured_run(base, src))
                print(f"{name} {src}: {runs[src][-1]['wall_s']:.1f} s wall, "
                      f"{runs[src][-1]['cpu_s']:.1f} CPU s", file=sys.stderr, flush=True)
        new = min(runs[here], key=lambda r: r["wall_s"])
        old = min(runs[baseline], key=lambda r: r["wall_s"])
        same = all(r["stats"] == new["stats"] for r in runs[here] + runs[baseline])
        print(f"| {label} | {new['stats'].get('entry_count', 0):,} | {new['wall_s']:.1f} | "
              f"{old['wall_s']:.1f} | {old['wall_s'] / new['wall_s']:.2f} | "
              f"{new['cpu_s']:.1f} | {old['cpu_s']:.1f} | {'yes' if same else 'NO'} |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="runs of each mode (best kept)")
    ap.add_argument("--cases", default="llama8b-prefill,g2s-prefill,qwen7b-decode",
                    help=f"comma-separated case names of {', '.join(CASES)} (the TP=8 "
                         "decode takes about 6 min a run)")
    ap.add_argument("--entry-costs", action="store_true", help="per-entry parse / lower / "
                    "pickle costs instead (module docstring)")
    ap.add_argument("--baseline", default=None, help="another tree's src folder: this "
                    "tree against it, both compiling ahead")
    a = ap.parse_args()
    if a.entry_costs:
        entry_costs()
        return
    names = a.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    if a.baseline:
        against(names, a.baseline, a.repeat)
        return
    print("| case | entries | ahead wall s | one process wall s | one process / ahead | "
          "ahead CPU s | one process CPU s | ahead peak RSS MB | one process peak RSS MB | "
          "same stats |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name in names:
        label, args = CASES[name]
        base = [*args, "--exact", "--no-trace", "--no-report"]
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(a.repeat):
            for ahead in (True, False):
                runs[ahead].append(measured_run(base if ahead else
                                                [*base, "--no-compile-ahead"]))
                print(f"{name} ahead={ahead}: {runs[ahead][-1]['wall_s']:.1f} s wall",
                      file=sys.stderr, flush=True)
        on = min(runs[True], key=lambda r: r["wall_s"])
        off = min(runs[False], key=lambda r: r["wall_s"])
        same = all(r["stats"] == runs[True][0]["stats"] for r in runs[True] + runs[False])
        print(f"| {label} | {on['stats'].get('entry_count', 0):,} | {on['wall_s']:.1f} | "
              f"{off['wall_s']:.1f} | {off['wall_s'] / on['wall_s']:.2f} | "
              f"{on['cpu_s']:.1f} | {off['cpu_s']:.1f} | {on['rss_mb']:,.0f} | "
              f"{off['rss_mb']:,.0f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
