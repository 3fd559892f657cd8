"""Seeded random CMDQ programs whose simulated cycles are recorded once and compared after
every change of the simulator's implementation (issue 38: faster, same cycles).

Each program mixes loads and stores that all hit one HBM channel (addresses inside one
interleave block), GEMM and vector tiles, whole-layer ops that stream through the
scheduler's staging TCM (TCM pressure: a tile holds up to the whole reserved region), NOP
and BARRIER, with random `deps_before` and `deps_after` edges. It runs on `small` twice:
as is, and with the HBM attached to one router only, so every transfer crosses one link.

    .venv/bin/python tests/hw/random_programs.py --record   # rewrite the expected cycles

The expected values (`random_programs_cycles.json`) were produced by the simulator with
ADR-0925's same-instant tie rule, before the event removals of issue 38's speed work;
`tests/hw/test_cycles_recorded.py` compares against them.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

EXPECTED = Path(__file__).with_name("random_programs_cycles.json")
SEEDS = range(24)
#: (name, topology overrides): the HBM port on every router, or on r0c0 only
VARIANTS = [("small", []), ("one_link", ["cube.hbm_ctrl.attach=[r0c0]"])]
# stats keys that record wall time or the tool version
VOLATILE = {"wall_s", "wall_time_s", "elapsed_s", "kernbench_version", "created_at"}


def program(seed: int) -> tuple[dict[str, Any], int]:
    """(CMDQ program, issue window) for `seed`."""
    rng = random.Random(seed)
    n = rng.randint(20, 120)
    hot = rng.randrange(0, 1 << 14) * 4096  # one 4 KiB block: one HBM channel
    entries: list[dict[str, Any]] = []
    for i in range(n):
        deps = sorted(set(rng.sample(range(i), min(i, rng.randint(0, 3))))) if i else []
        pe = rng.randrange(4)
        kind = rng.choices(["load", "store", "gemm", "ve", "layer", "nop", "barrier"],
                           [6, 4, 4, 3, 2, 1, 1])[0]
        if kind in ("load", "store"):
            addr = hot + rng.randrange(0, 32) * 64 if rng.random() < 0.7 else \
                rng.randrange(0, 1 << 20) * 64
            e = {"opcode": "DMA_LOAD_TILE" if kind == "load" else "DMA_STORE_TILE", "id": i,
                 "pe": pe, "qbits": 8, "dram_addr": addr, "spm_bank": 0,
                 "spm_offset": 0, "num_elements": rng.randint(1, 4096 * 4)}
            if rng.random() < 0.3:
                rows = rng.randint(2, 16)
                e.update(rows=rows, num_elements=rows * rng.randint(1, 1024),
                         stride_bytes=4096)
        elif kind == "gemm":
            e = {"opcode": "TE_GEMM_TILE", "id": i, "pe": pe, "ifm_bank": 0, "ifm_offset": 0,
                 "wgt_bank": 1, "wgt_offset": 0, "ofm_bank": 2, "ofm_offset": 0,
                 "m": rng.randint(1, 128), "n": rng.randint(1, 128), "k": rng.randint(1, 256),
                 "qbits_weight": rng.choice([4, 8]), "qbits_activation": 8}
        elif kind == "ve":
            e = {"opcode": rng.choice(["VE_SOFTMAX_TILE", "VE_GELU_TILE", "VE_LAYERNORM_TILE"]),
                 "id": i, "pe": pe, "in_bank": 0, "in_offset": 0, "out_bank": 1,
                 "out_offset": 0, "length": rng.randint(1, 2048), "qbits_activation": 8}
        elif kind == "layer":
            common = {"id": i, "pe": pe, "layer_id": f"L{i}",
                      "in_bytes": rng.randint(1, 1 << 20), "out_bytes": rng.randint(0, 1 << 19),
                      "dram_addr": hot if rng.random() < 0.5 else rng.randrange(0, 1 << 14) * 64}
            if rng.random() < 0.5:
                e = {"opcode": "VE_LAYER_OP", "elements": rng.randint(1, 1 << 16), **common}
            else:
                e = {"opcode": "TE_LAYER_OP", "m": rng.randint(1, 256),
                     "n": rng.randint(1, 256), "k": rng.randint(1, 256), **common}
        elif kind == "nop":
            e = {"opcode": "NOP", "id": i}
        else:
            e = {"opcode": "BARRIER", "id": i, "wait_for": deps}
            deps = []
        if kind != "barrier":
            e["deps_before"] = deps
        entries.append(e)
    # deps_after: entry i makes a later entry j wait for it
    for e in entries:
        i = e["id"]
        if e["opcode"] not in ("BARRIER",) and i + 1 < n and rng.random() < 0.15:
            later = sorted(set(rng.sample(range(i + 1, n), min(n - i - 1, rng.randint(1, 2)))))
            e["deps_after"] = later
    entries.append({"opcode": "END", "id": n})
    return {"cmdq": entries}, rng.choice([1, 2, 4, 8, 16, 64])


def run(seed: int, overrides: list[str]) -> dict[str, Any]:
    """The recorded figures of one program on one topology variant: every entry's
    (issue, start, end) ns unrounded, the total, and the sha256 of its stats.json."""
    from kernbench.cmdq.io import parse_program
    from kernbench.host.simulate import simulate_program
    from kernbench.topology import load_topology

    prog, window = program(seed)
    topo = load_topology("small", [*overrides, f"cube.m_cpu.issue_window={window}"])
    res = simulate_program(parse_program(prog), topo, trace=False)
    stats = {k: v for k, v in res.stats().items() if k not in VOLATILE}
    times = []
    for e in res.entries:
        cmd = e.command
        start = cmd.start_ns if cmd is not None and cmd.start_ns is not None else e.start_ns
        times.append([e.issue_ns, start, e.end_ns])
    digest = hashlib.sha256(json.dumps(stats, sort_keys=True).encode()).hexdigest()
    return {"total_ns": res.total_ns, "entries": times, "stats_sha256": digest}


def contention(seed: int, overrides: list[str]) -> tuple[int, int]:
    """(grants where two requests or more met, tiles that waited for staging bytes) of one
    program on one topology variant."""
    from kernbench.cmdq.io import parse_program
    from kernbench.components.builtin.pe_scheduler import PeScheduler
    from kernbench.host.simulate import simulate_program
    from kernbench.topology import load_topology

    prog, window = program(seed)
    topo = load_topology("small", [*overrides, f"cube.m_cpu.issue_window={window}"])
    sim = simulate_program(parse_program(prog), topo, trace=False).sim
    waits = sum(c.staging_waits for c in sim.components.values() if isinstance(c, PeScheduler))
    return sim.arbiter.met, waits


def record() -> dict[str, Any]:
    return {f"{seed}@{name}": run(seed, ov) for seed in SEEDS for name, ov in VARIANTS}


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    out = record()
    lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(out.items())]
    EXPECTED.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"{len(out)} runs → {EXPECTED}")
