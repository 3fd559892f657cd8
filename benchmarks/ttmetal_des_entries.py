"""One published row's tt-metal program on the DES, entry by entry (ADR-0863).

Run:
  .venv/bin/python benchmarks/ttmetal_des_entries.py [--entries 40] [--limit O,K] [--set K=V] \\
      CARD CONFIG M K N DTYPE FIDELITY IN0_STORAGE OUT_STORAGE GRID

Prints the program config, the simulated device time, the busy time of PE 0's and PE 9's
engines and the issue / start / end of the first entries (where the time goes: DRAM
reads, multicasts, GEMMs waiting for their command). --limit O,K runs only the first O
output blocks of every core with their first K K blocks (the extrapolation's prefix);
--set KEY=VALUE (repeatable) overrides a topology key after the DES's own overrides.
Parameters from benchmarks/data/silicon_params.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import ttmetal_des  # noqa: E402
from ttmetal_matmul import Chip, program  # noqa: E402

from kernbench.cmdq.io import parse_program  # noqa: E402
from kernbench.host.simulate import simulate_program  # noqa: E402
from kernbench.topology import load_topology  # noqa: E402

PARAMS = Path(__file__).parent / "data" / "silicon_params.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("card", "config", "m", "k", "n", "dtype", "math_fidelity", "in0_storage_type",
              "out_storage_type", "grid_size"):
        ap.add_argument(f)
    ap.add_argument("--entries", type=int, default=40)
    ap.add_argument("--limit", help="O,K: first O output blocks of K K blocks each")
    ap.add_argument("--set", action="append", default=[], help="topology override KEY=VALUE")
    a = ap.parse_args(argv)
    row = {k: v for k, v in vars(a).items() if k not in ("entries", "limit", "set")}
    limit = None
    if a.limit:
        try:
            o, k = (int(x) for x in a.limit.split(","))
        except ValueError:
            print(f"error: --limit {a.limit!r}: expected O,K (two integers)", file=sys.stderr)
            return 2
        limit = (o, k)
    row["in1_storage_type"] = "DRAM"
    params = json.loads(PARAMS.read_text())
    base = load_topology(row["card"].lower(), [])
    prog = program(row, Chip.from_topology(base))
    over = ttmetal_des.des_overrides(row, base, params, prog) + a.set
    topo = load_topology(row["card"].lower(), over)
    entries = ttmetal_des.emit(row, prog, topo, limit=limit)
    st = simulate_program(parse_program({"cmdq": entries}), topo, trace=False).stats()
    print(f"{prog.label()}: {len(entries)} entries, device {st['total_ns']:.0f} ns")
    for k, v in st["engines"].items():
        if k.split(".")[2] in ("pe0", "pe9") and v.get("ops"):
            print(f"  {k}: busy {v['busy_ns']:.0f} ns, {v['ops']} ops")
    for i in range(min(a.entries, len(entries) - 1)):
        e = st["entries"][str(i)]
        print(f"  #{i} {e['opcode']:15s} {e['pe']:16s} issue {e['issue_ns']:9.0f} "
              f"start {e['start_ns']:9.0f} end {e['end_ns']:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
