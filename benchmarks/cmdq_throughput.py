"""CMDQ entries simulated per second: a 10 000-entry program on the `base` preset.

Run:  .venv/bin/python benchmarks/cmdq_throughput.py [--entries 10000] [--trace]

The program is generated here (seeded): per PE, repeating load A → load B → GEMM → VE →
store, with deps inside each group, spread round-robin over all 64 PEs of `base`, and a
BARRIER every 1000 entries. Parse + validate and simulation are timed separately.
"""

from __future__ import annotations

import argparse
import json
import time

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import parse_bytes_fast
from kernbench.cmdq.validate import validate_program
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology


def make_program(n_entries: int, n_pes: int) -> dict:
    entries: list[dict] = []
    group = 0
    while len(entries) < n_entries - 1:
        i = len(entries)
        if i and i % 1000 == 0:
            entries.append({"opcode": "BARRIER", "id": i, "wait_for": [i - 1]})
            continue
        pe = group % n_pes
        base = (group * 65536) % (1 << 32)
        g = [
            {"opcode": "DMA_LOAD_TILE", "id": i, "pe": pe, "qbits": 8, "dram_addr": base,
             "spm_bank": 0, "spm_offset": 0, "num_elements": 8192},
            {"opcode": "DMA_LOAD_TILE", "id": i + 1, "pe": pe, "qbits": 8,
             "dram_addr": base + 8192, "spm_bank": 1, "spm_offset": 0, "num_elements": 8192},
            {"opcode": "TE_GEMM_TILE", "id": i + 2, "pe": pe, "ifm_bank": 0, "ifm_offset": 0,
             "wgt_bank": 1, "wgt_offset": 0, "ofm_bank": 2, "ofm_offset": 0, "m": 64, "n": 128,
             "k": 128, "qbits_weight": 8, "qbits_activation": 8, "deps_before": [i, i + 1]},
            {"opcode": "VE_GELU_TILE", "id": i + 3, "pe": pe, "in_bank": 2, "in_offset": 0,
             "out_bank": 4, "out_offset": 0, "length": 8192, "qbits_activation": 32,
             "deps_before": [i + 2]},
            {"opcode": "DMA_STORE_TILE", "id": i + 4, "pe": pe, "qbits": 32,
             "dram_addr": base + 16384, "spm_bank": 4, "spm_offset": 0, "num_elements": 8192,
             "deps_before": [i + 3]},
        ]
        room = n_entries - 1 - len(entries)
        entries.extend(g[:room] if room < len(g) else g)
        group += 1
    for e in entries:  # a truncated group may name ids past the end
        e["deps_before"] = [d for d in e.get("deps_before", []) if d < len(entries)]
    entries.append({"opcode": "END", "id": len(entries)})
    return {"cmdq": entries, "metadata": {"version": "1.1", "graph_name": "bench"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--trace", action="store_true", help="record the trace too")
    args = ap.parse_args()
    topo = load_topology("base")
    data = json.dumps(make_program(args.entries, len(topo.pes))).encode()
    t0 = time.perf_counter()
    prog = parse_bytes_fast(data)
    assert prog is not None
    errors = validate_program(prog, limits_for(topo))
    assert not errors, errors[:3]
    t1 = time.perf_counter()
    run = simulate_program(prog, topo, trace=args.trace)
    t2 = time.perf_counter()
    n = len(prog.cmdq)
    print(f"entries                 {n}")
    print(f"parse + validate        {t1 - t0:8.3f} s   {n / (t1 - t0):12,.0f} entries/s")
    print(f"simulate (base, 64 PE)  {t2 - t1:8.3f} s   {n / (t2 - t1):12,.0f} entries/s")
    print(f"simulated time          {run.total_ns / 1000:8.1f} us")


if __name__ == "__main__":
    main()
