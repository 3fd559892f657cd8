"""What the report costs on a real-size run: the README's Llama-3-8B command with its
report against the same command with `--no-report`, each in its own process (wall time,
peak RSS from os.wait4) and the size of the stats.json each writes.

    .venv/bin/python benchmarks/report_cost.py             # the table in docs/performance.md
    .venv/bin/python benchmarks/report_cost.py --quick     # tiny-llama-4l instead

The two runs go one after the other on the same machine; their ratio is the figure
(absolute times move with the machine's load). Prints a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "hf_configs"
README_8B = [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048"]
QUICK = [str(CFG / "tiny-llama-4l.json"), "-t", "small", "--seq-len", "128"]


def _kernbench() -> list[str]:
    exe = Path(sys.executable).with_name("kernbench")
    return [str(exe)] if exe.exists() else [sys.executable, "-c",
                                            "import sys; from kernbench.cli import main; "
                                            "sys.exit(main(sys.argv[1:]))"]


def run(args: list[str]) -> dict[str, float]:
    """wall s, peak RSS MB and stats.json MB of one `kernbench run ARGS`."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _kernbench() + ["run", *args, "-o", tmp]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        err = p.stderr.read().decode() if p.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
        size = (Path(tmp) / "stats.json").stat().st_size
    return {"wall_s": wall, "rss_mb": ru.ru_maxrss / 1024, "stats_mb": size / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny-llama-4l instead of 8B")
    a = ap.parse_args()
    base = QUICK if a.quick else README_8B
    rows = [("--no-report", run([*base, "--no-report"])), ("with the report", run(base))]
    ref = rows[0][1]
    print(f"`kernbench run {' '.join(Path(x).name if '/' in x else x for x in base)}`\n")
    print("| run | wall s | × | peak RSS MB | × | stats.json MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in rows:
        print(f"| {name} | {r['wall_s']:.1f} | {r['wall_s'] / ref['wall_s']:.2f} | "
              f"{r['rss_mb']:,.0f} | {r['rss_mb'] / ref['rss_mb']:.2f} | "
              f"{r['stats_mb']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
