"""Where a compile spends its CPU: `compile_model` of the GPT-2-small prefill 128 model
(12 layers, d 768, 12 heads, vocab 2048, as benchmarks/sim_speed.py) on `base`, per phase.

    .venv/bin/python benchmarks/compile_phases.py                 # this tree
    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/compile_phases.py
    .venv/bin/python benchmarks/compile_phases.py --scratch-bundle  # as a timing-only run
    .venv/bin/python benchmarks/compile_phases.py --clock faults    # or --clock system

Phases: loading the ONNX model (`load_model`: parse, checker, shape inference, import and
fusion), every compiler pass and its checks (the pass manager's timings, taken as CPU
time here), and the bundle's parts (`write_bundle`: cmdq.json and the other JSON files,
weights.npz, the IR and its weights, the model copy). CPU seconds (`time.process_time`,
every thread of the process; `--clock system`: the kernel's share, `--clock faults`: minor
page faults, `--clock wall`: wall seconds, where work on another thread or core is
not counted): on a shared machine compare trees in one run, not across
runs. `--scratch-bundle` writes the bundle a timing-only `kernbench run` writes (no
cmdq.json, no weights: `CompileRequest.write_weights`); a tree without that option writes
the whole bundle and says so on stderr.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

import kernbench.cli as cli  # first: the console script's settings before numpy loads

T: Counter = Counter()

#: what a phase is measured in (`--clock`): CPU s, kernel CPU s, or minor page faults
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter,
          "system": lambda: resource.getrusage(resource.RUSAGE_SELF).ru_stime,
          "faults": lambda: float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)}
clock = CLOCKS["cpu"]


def _wrap(owner: object, name: str, label: str) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        c0 = clock()
        try:
            return f(*a, **kw)
        finally:
            T[label] += clock() - c0

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch-bundle", action="store_true",
                    help="the bundle of a timing-only run (no cmdq.json, no weights)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="measure the phases in CPU s (default), wall s, kernel CPU s or "
                         "page faults")
    args = ap.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    import onnx

    import kernbench.compiler.manager as mgr
    import kernbench.compiler.pipeline as pipe
    import kernbench.host.flow as flow
    from kernbench.ir.model import Graph
    from kernbench.models.builders import build_gpt2
    from kernbench.topology import load_topology

    if hasattr(cli, "tune_gc"):
        cli.tune_gc()
    if hasattr(cli, "tune_heap"):
        cli.tune_heap()
    _wrap(flow, "load_model", "load_model")
    _wrap(flow, "write_bundle", "write_bundle (all)")
    _wrap(pipe, "write_json", "  bundle: JSON files")
    _wrap(pipe, "_write_weights", "  bundle: weight files and the model copy")
    _wrap(pipe, "save_weights", "  bundle: weights.npz")
    _wrap(pipe, "copy_with_external_data", "  bundle: model.onnx copy")
    _wrap(Graph, "save", "  bundle: ir.json + ir_weights.npz")
    mgr.time = types.SimpleNamespace(perf_counter=clock)  # pass timings on the same clock
    run0 = mgr.PassManager.run

    def run(self, state):  # noqa: ANN001, ANN202
        out = run0(self, state)
        for k, v in self.timings.items():
            T[f"pass {k}"] += v
        for k, v in self.check_timings.items():
            T[f"checks {k}"] += v
        return out

    mgr.PassManager.run = run
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        onnx.save(build_gpt2(n_layer=12, d=768, heads=12, seq=128, vocab=2048), str(model))
        c0 = clock()
        req = flow.CompileRequest()
        if args.scratch_bundle:
            if "write_weights" in flow.CompileRequest.__dataclass_fields__:
                req = flow.CompileRequest(write_cmdq=False, write_weights=False)
            else:
                print("this tree has no write_weights: the whole bundle is written",
                      file=sys.stderr)
        flow.compile_model(model, load_topology("base"), Path(tmp) / "bundle", req)
        total = clock() - c0
    unit = {"cpu": "CPU s", "wall": "wall s", "system": "kernel CPU s",
            "faults": "page faults"}[args.clock]
    fmt = "{:,.0f}" if args.clock == "faults" else "{:.2f}"
    print(f"| phase | {unit} |\n| --- | ---: |\n| compile_model, whole | {fmt.format(total)} |")
    for k, v in sorted(T.items(), key=lambda kv: -kv[1]):
        if v >= (1000 if args.clock == "faults" else 0.05):
            print(f"| {k} | {fmt.format(v)} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
