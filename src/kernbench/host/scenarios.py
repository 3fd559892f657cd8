"""Built-in hardware scenarios: small workloads on the internal command API.

Used by `kernbench demo --scenario`, the benchmarks and the tests, to exercise the
hardware model without a compiler in the loop.
"""

from __future__ import annotations

from typing import Any

from kernbench.common.pe_commands import PeCommand, composite_gemm
from kernbench.sim_engine.engine import Simulator
from kernbench.topology.model import Topology


def gemm_pipeline(
    topology: Topology, *, tiles: int = 8, tile_m: int = 128, n: int = 128, k: int = 128,
    pes: int | None = None, trace: bool = True,
) -> tuple[Simulator, list[PeCommand]]:
    """Every PE runs one composite GEMM: per tile DMA_READ → FETCH → GEMM → STORE → DMA_WRITE.

    Tile t of PE p reads A from and writes C to HBM of p's own cube, at disjoint addresses.
    """
    sim = Simulator(topology, trace=trace)
    cmds: list[PeCommand] = []
    npes = len(topology.pes) if pes is None else pes
    a_bytes = tile_m * k
    c_bytes = tile_m * n * 4
    for p in topology.pes[:npes]:
        base = p.cube.hbm_base + p.local * tiles * (a_bytes + c_bytes)
        cmd = composite_gemm(f"gemm@{p.id}", m_tiles=tiles, tile_m=tile_m, n=n, k=k,
                             src_addr=base, dst_addr=base + tiles * a_bytes)
        sim.submit(p, cmd)
        cmds.append(cmd)
    return sim, cmds


SCENARIOS: dict[str, Any] = {"gemm_pipeline": gemm_pipeline}
