"""Run one collective on a many-chip topology: lower it, simulate it, and (with `verify`)
execute it in the data pass and compare every rank's output with numpy.

Verification inputs are random integers in [-8, 8): every partial sum of up to 16 ranks
is exact in bf16, fp16 and fp32, so any summation order gives numpy's result exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.compiler.collectives import Collective, CollectiveProgram, lower_collective
from kernbench.host.simulate import CmdqRun, simulate_program
from kernbench.numerics.dtypes import np_dtype
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology.model import Topology


@dataclass
class CollectiveResult:
    program: CollectiveProgram
    run: CmdqRun
    verified: bool | None       # None: not checked
    mismatched_ranks: list[int]

    @property
    def time_us(self) -> float:
        return self.run.total_ns / 1e3

    @property
    def chip_link_bytes(self) -> int:
        return int(self.run.sim.actions.totals.get("chip_link_byte", 0))

    def summary(self, c: Collective) -> dict[str, Any]:
        """The one-line figures: time, algorithm and bus bandwidth (nccl-tests' busbw:
        bytes × 2(N−1)/N for all-reduce, × (N−1)/N for the others, over the time)."""
        n = len(c.chips)
        factor = {"all_reduce": 2 * (n - 1) / n, "send_recv": 1.0}.get(c.op, (n - 1) / n)
        size = c.count * c.elem_bytes
        ns = self.run.total_ns
        return {"op": c.op, "algorithm": c.algorithm, "chips": list(c.chips),
                "bytes_per_chip": c.nbytes, "dtype": c.dtype, "time_us": round(ns / 1e3, 3),
                "algbw_gbs": round(size / ns, 3) if ns else 0.0,
                "busbw_gbs": round(size * factor / ns, 3) if ns else 0.0,
                "chip_link_bytes": self.chip_link_bytes, "entries": len(self.program.doc["cmdq"]),
                "verified": self.verified}


def reference(c: Collective, x: np.ndarray) -> list[np.ndarray | None]:
    """What each rank's `out` holds after `c` with rank r's input x[r] (numpy)."""
    n = len(c.chips)
    chunk = c.count // n
    if c.op == "all_reduce":
        return [x.sum(0, dtype=np.float64).astype(x.dtype)] * n
    if c.op == "reduce_scatter":
        s = x.sum(0, dtype=np.float64).astype(x.dtype)
        return [s[r * chunk:(r + 1) * chunk] for r in range(n)]
    if c.op == "all_gather":
        return [x.reshape(-1)] * n
    if c.op == "all_to_all":
        return [np.concatenate([x[q, r * chunk:(r + 1) * chunk] for q in range(n)])
                for r in range(n)]
    return [None, x[0]]  # send_recv: rank 1 receives rank 0's input


#: worker PEs per chip when none are asked for (fewer on a chip with fewer PEs)
DEFAULT_WORKERS = 8


def chip_pes(topo: Topology, links: int) -> int:
    """The PEs of one chip on the `links` link lanes a collective uses: most workers it
    can have."""
    per_chip = len(topo.pes) // topo.chips
    return sum(1 for p in topo.pes[:per_chip] if topo.lane_of(p) < max(1, links))


def run_collective(topo: Topology, c: Collective, *, verify: bool = False, trace: bool = False,
                   seed: int = 0, workers: int | None = None,
                   links: int = 1) -> CollectiveResult:
    """Lower `c` on `topo`, simulate it; with `verify`, run the data pass and compare.
    `workers`: worker PEs per chip (default `DEFAULT_WORKERS`, or every PE of a chip on
    the lanes used when it has fewer, as `kernbench collective` does)."""
    if workers is None:
        workers = min(DEFAULT_WORKERS, chip_pes(topo, links))
    prog = lower_collective(c, topo, limits_for(topo), workers=workers, links=links)
    program = parse_program(prog.doc)
    if not verify:
        run = simulate_program(program, topo, trace=trace, per_entry=trace)
        return CollectiveResult(prog, run, None, [])
    n = len(c.chips)
    shape = (n, c.count // n if c.op == "all_gather" else c.count)
    x = np.random.default_rng(seed).integers(-8, 8, shape).astype(np_dtype(c.dtype))
    store = MemoryStore.for_topology(topo)
    for r, ch in enumerate(c.chips):
        store.write("hbm", prog.bases[ch] + prog.buffers.inp, x[r])
    init = store.snapshot()
    log = OpLogger()
    run = simulate_program(program, topo, op_logger=log, data=TcmData(), trace=trace)
    mem = DataExecutor(log, init).run()
    bad = []
    for r, want in enumerate(reference(c, x)):
        if want is None:
            continue
        got = mem.read("hbm", prog.bases[c.chips[r]] + prog.buffers.out, want.shape, want.dtype)
        if not np.array_equal(got, want):
            bad.append(r)
    return CollectiveResult(prog, run, not bad, bad)
