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
from pathlib import Path

from measured_run import measured_run

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "hf_configs"
README_8B = [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048"]
QUICK = [str(CFG / "tiny-llama-4l.json"), "-t", "small", "--seq-len", "128"]


def run(args: list[str]) -> dict[str, float]:
    """wall s, peak RSS MB and stats.json MB of one `kernbench run ARGS`."""
    r = measured_run(args)
    return {"wall_s": r["wall_s"], "rss_mb": r["rss_mb"], "stats_mb": r["stats_bytes"] / 1e6}


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
