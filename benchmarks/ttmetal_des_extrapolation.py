"""How close the DES's K-block extrapolation comes to the exact run (ADR-0913).

Run:
  .venv/bin/python benchmarks/ttmetal_des_extrapolation.py [--max-core-steps 80000]

For every distinct program of the published table (benchmarks/data/tt_gemm_flops.csv)
that `ttmetal_des.device_ns` would extrapolate (more than MAX_CORE_STEPS core-steps) and
that is small enough to run whole (at most --max-core-steps), runs it both ways and
prints the signed difference; the last line is the largest |difference|. Parameters from
benchmarks/data/silicon_params.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import silicon  # noqa: E402
import ttmetal_des  # noqa: E402
from ttmetal_matmul import program  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-core-steps", type=int, default=80000)
    a = ap.parse_args(argv)
    rows = silicon.read_table(silicon.TABLE)
    cs = silicon.chips()
    params = json.loads(silicon.PARAMS.read_text())
    base = {c: load_topology(p, []) for c, p in silicon.CARDS.items()}
    seen: set[tuple] = set()
    worst = 0.0
    print("| row | program | exact ns | extrapolated ns | diff % | s exact / extrap. |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        key = silicon.des_key(r)
        if key in seen:
            continue
        seen.add(key)
        prog = program(r, cs[r["card"]])
        obs, nkb = ttmetal_des.blocks(r, prog)
        size = obs * nkb * prog.cores_x * prog.cores_y
        if not ttmetal_des.MAX_CORE_STEPS < size <= a.max_core_steps:
            continue
        topo = load_topology(silicon.CARDS[r["card"]],
                             ttmetal_des.des_overrides(r, base[r["card"]], params, prog))
        try:
            t0 = time.perf_counter()
            ex = ttmetal_des.device_ns(r, prog, topo, exact=True)[0]
            t1 = time.perf_counter()
            ap_ = ttmetal_des.device_ns(r, prog, topo)[0]
            t2 = time.perf_counter()
        except ValueError:  # buffers exceed the TCM: not run by silicon.py either
            continue
        d = 100.0 * (ap_ / ex - 1)
        worst = max(worst, abs(d))
        print(f"| {' '.join(key)} | {prog.label()} | {ex:.0f} | {ap_:.0f} | {d:+.2f} | "
              f"{t1 - t0:.0f} / {t2 - t1:.0f} |", flush=True)
    print(f"largest |difference|: {worst:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
