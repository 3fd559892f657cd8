"""Llama-3-8B decode steps by batch on `large`: compiled entries, simulated ms, CPU s.

    .venv/bin/python benchmarks/decode_batch.py [--batches 1,2,4,8,16,28,32] [--kv-len 512]
    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/decode_batch.py   # another tree

Each program is `kernbench run tests/hf_configs/llama-3-8b -t large --batch B --seq-len 1
--kv-len 512 --json --no-trace` (shape-only; 4 of the 32 blocks simulated, the rest
replayed) in its own process; its CPU s (user + system, from os.wait4) and the stats'
`total_ns` and `entry_count` go to a markdown table on stdout (docs/performance.md).
A schedule is monotone-sensible in batch when a smaller batch is never much slower.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "hf_configs" / "llama-3-8b"


def run(batch: int, kv_len: int, topology: str) -> tuple[int, float, float]:
    """(entries, simulated ms, CPU s) of one decode step's program."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        stats = Path(tmp) / "stats.json"
        code = ("import sys; from kernbench.cli import main; "
                "sys.exit(main(sys.argv[1:]))")
        with stats.open("w") as f:
            p = subprocess.Popen([sys.executable, "-c", code, "run", str(MODEL), "-t", topology,
                                  "--batch", str(batch), "--seq-len", "1", "--kv-len",
                                  str(kv_len), "--json", "--no-trace", "--quiet", "-o",
                                  str(out)], stdout=f, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"batch {batch}: kernbench run failed")
        d = json.loads(stats.read_text())
    return d["entry_count"], d["total_ns"] / 1e6, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,2,4,8,16,28,32")
    ap.add_argument("--kv-len", type=int, default=512)
    ap.add_argument("--topology", default="large")
    a = ap.parse_args()
    print("| batch | entries | simulated ms | CPU s |")
    print("| ---: | ---: | ---: | ---: |")
    for b in (int(x) for x in a.batches.split(",")):
        entries, ms, cpu = run(b, a.kv_len, a.topology)
        print(f"| {b} | {entries} | {ms:.3f} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
