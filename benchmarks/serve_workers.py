"""A cold `kernbench serve` with one worker and with two, and against another tree.

    .venv/bin/python benchmarks/serve_workers.py [--requests 40] [--output-len 24]
        [--baseline /path/to/other/src] [--workers 1,2]

Each run is `kernbench serve tests/hf_configs/llama-3-8b -t large --requests N --rate 1e6
--prompt-len 512 --output-len L --policy continuous --max-batch 32 --seed 0 --workers W`
with a fresh step cache (cold: every program simulated) in a process of its own; wall
s, CPU s (os.wait4: the serve process and its reaped workers), peak RSS, the programs
simulated and the CPU s of programs simulated ahead and never used (from its stderr
note). The trees (this one, then --baseline's `src` through PYTHONPATH) alternate for
each worker count. The last column says whether the run's output files are byte-identical
to the first run's (they must be: the worker count and the tree's speculation change no
output). Prints a markdown table on stdout (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "hf_configs" / "llama-3-8b"
CLI = "import sys; from kernbench.cli import main; sys.exit(main(sys.argv[1:]))"


def run(src: Path | None, workers: int, a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-c", CLI, "serve", str(MODEL), "-t", "large", "--requests",
               str(a.requests), "--rate", "1e6", "--prompt-len", "512", "--output-len",
               str(a.output_len), "--policy", "continuous", "--max-batch", "32", "--seed", "0",
               "--workers", str(workers), "--step-cache", str(Path(tmp) / "cache.json"),
               "--out", str(out)]
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        err = p.stderr.read().decode() if p.stderr else ""
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
        spare = re.search(r"([\d.]+) CPU s simulated ahead and not needed", err)
        programs = re.search(r"steps from (\d+) programs", err)
        files = {f.name: f.read_bytes() for f in sorted(out.iterdir()) if f.is_file()}
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss / 1024,
            "programs": int(programs.group(1)) if programs else -1,
            "spare": float(spare.group(1)) if spare else 0.0, "files": files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--output-len", type=int, default=24)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--baseline", type=Path, help="another tree's src/ to compare with")
    a = ap.parse_args()
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if a.baseline is not None:
        trees.append(("baseline", a.baseline))
    print("| tree | workers | wall s | CPU s | peak RSS MB | programs | CPU s ahead, unused | "
          "same files |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    first = None
    for w in (int(x) for x in a.workers.split(",")):
        for name, src in trees:
            r = run(src, w, a)
            first = first or r["files"]
            print(f"| {name} | {w} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss']:,.0f} | "
                  f"{r['programs']} | {r['spare']:.1f} | "
                  f"{'yes' if r['files'] == first else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
