"""Matmul kernel scaling: simulated time as the grid's programs spread over more PEs.

    .venv/bin/python benchmarks/kernel_scaling.py [--preset base] [--size 512] [--json out.json]

A fixed blocked matmul (fp16 operands, fp32 accumulator, BLOCK 64×64×64) runs with its
programs placed on the first P PEs (program i → PE i mod P) for P = 1, 2, 4, ... The
simulated time falls with P until the HBM holding the operands (cube 0's, where the
device buffers live) saturates; the table shows time, speed-up, HBM utilisation of the
busiest channel, the roofline bound and the fraction of it achieved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches import matmul  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402
from kernbench.triton_emu.runtime import roofline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="base")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-replicate", action="store_true",
                    help="keep A and B only in cube 0's HBM (default: replicated per cube)")
    a = ap.parse_args()
    topo = load_topology(a.preset, a.set)
    n = a.size
    rows = []
    p = 1
    while p <= len(topo.pes):
        t0 = time.perf_counter()
        r = matmul.run(topo, pes=p, M=n, N=n, K=n, block_m=a.block, block_n=a.block,
                       block_k=a.block, replicate=not a.no_replicate)
        wall = time.perf_counter() - t0
        rf = roofline(topo, 2 * n ** 3, 2 * 3 * n * n, 16, pes=p)
        rows.append({"pes": p, "ok": r["ok"], "total_ns": r["total_ns"],
                     "bound_ns": round(rf["bound_ns"], 1),
                     "compute_bound_ns": round(rf["compute_ns"], 1),
                     "memory_bound_ns": round(rf["memory_ns"], 1),
                     "roofline_fraction": round(rf["bound_ns"] / r["total_ns"], 3),
                     "bottleneck": r["bottleneck"]["component"],
                     "bottleneck_util": r["bottleneck"]["utilization"],
                     "wall_s": round(wall, 2), "hbm_util": r["hbm_util"]})
        p *= 2
    base = rows[0]["total_ns"]
    print(f"matmul {n}x{n}x{n} fp16, block {a.block}, preset {a.preset} "
          f"({len(topo.pes)} PEs), {(n // a.block) ** 2} programs")
    print(f"{'PEs':>4} {'time ns':>11} {'speedup':>8} {'bound ns':>9} {'roofline':>8} "
          f"{'HBM util':>8} {'bottleneck (util)':<46} {'wall s':>6}")
    for r in rows:
        print(f"{r['pes']:>4} {r['total_ns']:>11.0f} {base / r['total_ns']:>8.2f} "
              f"{r['bound_ns']:>9.0f} {r['roofline_fraction']:>8.3f} {r['hbm_util']:>8.2f} "
              f"{r['bottleneck'] + ' (' + format(r['bottleneck_util'], '.2f') + ')':<46} "
              f"{r['wall_s']:>6}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
