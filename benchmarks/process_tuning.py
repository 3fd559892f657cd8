"""What the collector and heap settings are worth (ADR-1255), each measurement in a fresh
interpreter of the tree on PYTHONPATH (compare two trees by running this once with each):

- `bundle`: `simulate_bundle` of gpt2-small prefill 128 on `base` (compiled first, not
  timed) with Python's default collector thresholds, as a program calling the library
  runs it: CPU s of the call and of the collections inside it (`gc.callbacks`);
- `worker`: one serve step program (Llama-3-8B decode on `large`, batch 16 and 32) in a
  process with Python's and the C library's defaults, as a spawned worker had them, and
  with `tune_process` (the console script's settings): CPU s per program.

    .venv/bin/python benchmarks/process_tuning.py [--cases bundle,worker]
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/process_tuning.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUNDLE = """
import gc, json, sys, tempfile, time
from pathlib import Path
import onnx
from kernbench.host.flow import TIMING_ONLY, compile_model, simulate_bundle
from kernbench.models.builders import build_gpt2
from kernbench.topology import load_topology
tmp = Path(tempfile.mkdtemp())
onnx.save(build_gpt2(n_layer=12, d=768, heads=12, seq=128, vocab=2048), str(tmp / "m.onnx"))
topo = load_topology("base")
compile_model(tmp / "m.onnx", topo, tmp / "bundle")
acc = {"s": 0.0, "n": 0}
start = {}
def cb(phase, info):
    if phase == "start":
        start["t"] = time.process_time()
    else:
        acc["s"] += time.process_time() - start["t"]
        acc["n"] += 1
gc.collect()
gc.callbacks.append(cb)
t0 = time.process_time()
res = simulate_bundle(tmp / "bundle", topo, tmp / "out", TIMING_ONLY)
t = time.process_time() - t0
gc.callbacks.remove(cb)
print(json.dumps({"simulate_cpu_s": round(t, 2), "collections": acc["n"],
                  "collections_cpu_s": round(acc["s"], 2), "ns": res.stats["total_ns"]}))
"""

WORKER = """
import json, sys, tempfile, time
from pathlib import Path
if sys.argv[1] == "tuned":
    from kernbench.cli import tune_gc, tune_heap  # where every tree has them
    tune_gc(); tune_heap()
from kernbench.host.serve.model import ServedModel
from kernbench.topology import load_topology
topo = load_topology("large")
m = ServedModel.open(Path(sys.argv[2]), None, Path(tempfile.mkdtemp()))
out = {}
for shape in [(16, 1, 512), (32, 1, 520)]:
    t0 = time.process_time()
    ns = m.simulate(shape, topo)
    out[str(shape)] = {"cpu_s": round(time.process_time() - t0, 2), "ns": ns}
print(json.dumps(out))
"""


def _run(code: str, *args: str) -> dict:
    """`code` in a fresh interpreter (the environment's PYTHONPATH chooses the tree)."""
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="bundle,worker")
    cases = ap.parse_args().cases.split(",")
    if "bundle" in cases:
        r = _run(BUNDLE)
        print(f"bundle: simulate_bundle {r['simulate_cpu_s']} CPU s, of it "
              f"{r['collections_cpu_s']} CPU s in {r['collections']} collections "
              f"(simulated {r['ns']} ns)")
    if "worker" in cases:
        model = str(ROOT / "tests" / "hf_configs" / "llama-3-8b")
        for mode in ("defaults", "tuned"):
            r = _run(WORKER, mode, model)
            print(f"worker, {mode}: " + ", ".join(
                f"{shape} {v['cpu_s']} CPU s ({v['ns']:.0f} ns)" for shape, v in r.items()))


if __name__ == "__main__":
    main()
