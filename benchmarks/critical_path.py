"""Where a run's critical path spends its time, by layer type and by (layer type, opcode).

    .venv/bin/kernbench run gpt2-small --seq-len 1 --kv-len 1024 -t base --no-trace --out OUT
    .venv/bin/python benchmarks/critical_path.py OUT/stats.json
    .venv/bin/python benchmarks/critical_path.py OUT/stats.json --window 95 114  # one block

Reads `critical_path` and `entries` of a stats.json (a run that kept per-entry records:
with the report or a trace; docs/stats.md). The path is the chain of dependencies that
ends last (`host.simulate.critical_path`). Each entry on it is charged the time from the
previous entry's end to its own end. "busy" is the part after the entry started, and
"wait" the part before: its command trip, and queueing behind other work on its engine.
`--window LO HI` lists instead every entry on the path that ends between LO and HI µs
(layer, opcode, PE, start, end, wait, busy), e.g. one decoder block.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def breakdown(stats: dict) -> tuple[float, dict[str, float], dict[tuple[str, str], list[float]]]:
    """(end of the path, ns per layer type, [busy, wait] ns per (layer type, opcode))."""
    entries, layers = stats["entries"], stats["layers"]
    by_op: dict[str, float] = collections.defaultdict(float)
    by_opcode: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    prev = 0.0
    for i in stats["critical_path"]:
        e = entries[str(i)]
        lid = e["layer_id"]
        op = layers[lid]["op_type"] if lid in layers else str(lid)
        busy = e["end_ns"] - max(e["start_ns"], prev)
        by_op[op] += e["end_ns"] - prev
        by_opcode[(op, e["opcode"])][0] += busy
        by_opcode[(op, e["opcode"])][1] += e["end_ns"] - prev - busy
        prev = e["end_ns"]
    return prev, dict(by_op), dict(by_opcode)


def window(stats: dict, lo_ns: float, hi_ns: float) -> list[tuple]:
    """(layer, layer type, opcode, PE, start, end, wait, busy) in ns of each entry on the
    path that ends in [lo_ns, hi_ns], charged as in `breakdown`."""
    entries, layers = stats["entries"], stats["layers"]
    rows, prev = [], 0.0
    for i in stats["critical_path"]:
        e = entries[str(i)]
        if lo_ns <= e["end_ns"] <= hi_ns:
            lid = e["layer_id"]
            op = layers[lid]["op_type"] if lid in layers else str(lid)
            busy = e["end_ns"] - max(e["start_ns"], prev)
            rows.append((lid, op, e["opcode"], e["pe"], e["start_ns"], e["end_ns"],
                         e["end_ns"] - prev - busy, busy))
        prev = e["end_ns"]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stats", type=Path, help="stats.json of a run with per-entry records")
    ap.add_argument("--top", type=int, default=20, help="(layer type, opcode) rows to print")
    ap.add_argument("--window", nargs=2, type=float, metavar=("LO", "HI"),
                    help="list the path's entries ending between LO and HI µs instead")
    args = ap.parse_args(argv)
    stats = json.loads(args.stats.read_text())
    if not stats.get("critical_path"):
        print(f"{args.stats}: no critical_path (run with the report or a trace)",
              file=sys.stderr)
        return 2
    if args.window:
        print("| layer | type | opcode | PE | start µs | end µs | wait ns | busy ns |\n"
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
        for lid, op, opcode, pe, start, end, wait, busy in window(
                stats, args.window[0] * 1000, args.window[1] * 1000):
            print(f"| {lid} | {op} | {opcode} | {pe} | {start / 1000:.3f} | {end / 1000:.3f} "
                  f"| {wait:.1f} | {busy:.1f} |")
        return 0
    end, by_op, by_opcode = breakdown(stats)
    print(f"critical path ends at {end / 1000:.1f} µs (simulated entries)")
    print("| layer type | µs on the path |\n| --- | ---: |")
    for op, ns in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"| {op} | {ns / 1000:.1f} |")
    print("\n| layer type | opcode | busy µs | wait µs |\n| --- | --- | ---: | ---: |")
    rows = sorted(by_opcode.items(), key=lambda kv: -sum(kv[1]))[:args.top]
    for (op, opcode), (busy, wait) in rows:
        print(f"| {op} | {opcode} | {busy / 1000:.1f} | {wait / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
