"""Compile CPU time of GPT-2-small prefill 128 on `base` for several source trees, measured
alternately in one run (the machine is shared: compare ratios, not absolute seconds).

    .venv/bin/python benchmarks/compile_trees.py --baseline /tmp/old/src --repeat 3
    .venv/bin/python benchmarks/compile_trees.py --baseline A/src --baseline B/src

The model (12 layers, d 768, 12 heads, vocab 2048, as benchmarks/sim_speed.py) is built
and saved once; each measurement is `compile_model` of that file to a full bundle in a
fresh process on one tree (PYTHONPATH), with the console script's garbage collector and
heap settings when that tree has them, so a tree as old as the issue's (which lacks the
names benchmarks/sim_speed.py imports) runs too. Columns: CPU s of the compile (user +
system, `resource.getrusage`), of it in the kernel (writing the bundle, faulting memory
in), minor page faults, the process's peak resident MB (VmHWM); the median over `--repeat`
rounds, each round every tree once, and each baseline's median over this tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = {"n_layer": 12, "d": 768, "heads": 12, "seq": 128, "vocab": 2048}

_WORKER = """
import json, resource, shutil, sys, tempfile
from pathlib import Path
import kernbench.cli as cli
import kernbench.host.flow as flow
from kernbench.topology import load_topology
for name in ("tune_gc", "tune_heap"):
    if hasattr(cli, name):
        getattr(cli, name)()
topo = load_topology("base")
out = Path(tempfile.mkdtemp(prefix="compile_trees"))
r0 = resource.getrusage(resource.RUSAGE_SELF)
flow.compile_model(Path(sys.argv[1]), topo, out / "bundle")
r1 = resource.getrusage(resource.RUSAGE_SELF)
shutil.rmtree(out)
try:  # this process's own peak: ru_maxrss also counts the parent's size at the fork
    hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")]
    rss = int(hwm[0].split()[1]) / 1024
except (OSError, IndexError):
    rss = r1.ru_maxrss / 1024
print(json.dumps({"cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "sys": r1.ru_stime - r0.ru_stime, "faults": r1.ru_minflt - r0.ru_minflt,
                  "rss_mb": rss}))
"""


def measure(src: str, model: Path) -> dict:
    """One compile of `model` in a fresh process on the tree `src`."""
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", _WORKER, str(model)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"compile failed on {src}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", action="append", default=[],
                    help="another tree's src folder (repeatable)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (median reported)")
    a = ap.parse_args()
    import onnx

    import kernbench  # noqa: F401 - the console script's settings before numpy loads
    from kernbench.models.builders import build_gpt2

    trees = [*a.baseline, str(ROOT / "src")]
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        onnx.save(build_gpt2(**CASE), str(model))
        for r in range(a.repeat):
            for t in trees:
                runs[t].append(measure(t, model))
                print(f"round {r + 1}: {t}: {runs[t][-1]['cpu']:.2f} CPU s", file=sys.stderr)
    med = {t: {k: statistics.median(x[k] for x in runs[t]) for k in runs[t][0]} for t in trees}
    mine = med[str(ROOT / "src")]["cpu"]
    print("| tree | compile CPU s | of it kernel s | minor faults | peak RSS MB | "
          "this tree faster by |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for t in trees:
        m = med[t]
        print(f"| {'this tree' if t == str(ROOT / 'src') else t} | {m['cpu']:.2f} | "
              f"{m['sys']:.2f} | {m['faults']:,.0f} | {m['rss_mb']:.0f} | "
              f"{m['cpu'] / mine:.2f} |")


if __name__ == "__main__":
    main()
