"""Tile-shape choice: GEMM tiles aligned to the systolic array, within a TCM bank.

For an (M, N, K) GEMM the tiler picks (tm, tn, tk) from array-aligned candidates such
that every operand tile (A tm×tk, W tk×tn, accumulator tm×tn int32/fp32) fits in one TCM
bank and two of each per tensor engine (double buffering) fit in the AllocatableTCM,
minimising the estimated time of the busiest PE. Its K steps are pipelined: the loads of
step i + 1 run while the array computes step i, so a PE takes one step's load, then per
step the larger of its compute (systolic cycles + a fixed command overhead) and its loads
(A and W bytes at the PE's share of the HBM bandwidth, `dma_bytes_per_cycle`; 0 = loads
are free), for ceil(tiles / (PEs × engines per PE)) tiles; or, when larger, the fixed
latency of the busiest PE's serial DMA transfers. Candidates are array-aligned powers of
two plus the sizes that split the rows / columns evenly over the PEs (so that no wave
runs half empty). Ties prefer fewer, larger tiles (fewer commands).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from kernbench.components.builtin.systolic import systolic_compute_cycles

#: fixed cost charged per TE command when comparing tilings (issue, fetch/store latency):
#: it makes the tiler prefer fewer, larger K steps when the array time is otherwise equal
OP_OVERHEAD_CYCLES = 300


@dataclass(frozen=True)
class GemmTiles:
    tm: int
    tn: int
    tk: int

    def counts(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        return math.ceil(m / self.tm), math.ceil(n / self.tn), math.ceil(k / self.tk)


def _cands(total: int, options: tuple[int, ...]) -> list[int]:
    out = sorted({min(total, o) for o in options}, reverse=True)
    return out or [total]


@lru_cache(maxsize=4096)
def _cycles(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> int:
    return systolic_compute_cycles(m, n, k, rows, cols, dataflow)


def _balanced(total: int, parts: int, align: int) -> tuple[int, ...]:
    """Sizes that cut `total` into about `parts`, `parts` / 2, ... pieces, array-aligned."""
    out = []
    p = parts
    while p >= 2:
        size = -(-total // p)
        out.append(-(-size // align) * align)
        p //= 2
    return tuple(out)


def _tile_cycles(tm: int, tn: int, tk: int, k: int, load_bytes_per_k: float,
                 bpc: float, rows: int, cols: int, dataflow: str) -> tuple[float, float]:
    """(pipelined cycles of one output tile's K loop, cycles of its first load)."""
    full, rest = divmod(k, tk)
    total = 0.0
    first = load_bytes_per_k * tk / bpc if bpc else 0.0
    for size, count in ((tk, full), (rest, 1 if rest else 0)):
        if not count:
            continue
        compute = _cycles(tm, tn, size, rows, cols, dataflow) + OP_OVERHEAD_CYCLES
        load = load_bytes_per_k * size / bpc if bpc else 0.0
        total += count * max(compute, load)
    return total, first


@lru_cache(maxsize=1024)
def choose_gemm_tiles(m: int, n: int, k: int, *, a_bytes: float, w_bytes: float,
                      bank_bytes: int, tcm_bytes: int, rows: int, cols: int, dataflow: str,
                      n_pes: int, engines: int = 1, dma_bytes_per_cycle: float = 0.0,
                      dma_fixed_cycles: float = 0.0) -> GemmTiles:
    """The tile shape of an (m, n, k) GEMM on `n_pes` PEs of `engines` tensor engines
    each (see the module docstring); ValueError when no candidate fits a bank."""
    best = None
    for tn in _cands(n, (256, 128, 64, 32) + _balanced(n, n_pes, cols)):
        for tm in _cands(m, (1024, 512, 256, 128, 64, 32, 16) + _balanced(m, n_pes, rows)):
            c = tm * tn * 4
            if c > bank_bytes:
                continue
            for tk in _cands(k, (2048, 1024, 512, 256, 128, 64, 32)):
                a = math.ceil(tm * tk * a_bytes)
                w = math.ceil(tk * tn * w_bytes)
                # two output tiles in flight per tensor engine (interleaved K loops), A/W
                # double-buffered
                if a > bank_bytes or w > bank_bytes or 2 * engines * (a + w + c) > tcm_bytes:
                    continue
                mt, nt, kt = math.ceil(m / tm), math.ceil(n / tn), math.ceil(k / tk)
                per_tile, first = _tile_cycles(tm, tn, tk, k, tm * a_bytes + tn * w_bytes,
                                               dma_bytes_per_cycle, rows, cols, dataflow)
                waves = math.ceil(mt * nt / (n_pes * engines))
                est = first + waves * per_tile
                if dma_fixed_cycles:
                    # a PE's DMA read channel serves one transfer at a time: per tile an
                    # A and a W load per K step and the epilogue's scale load and store,
                    # each paying the fixed latency, however many engines compute
                    est = max(est, math.ceil(mt * nt / n_pes) * (2 * kt + 2) * dma_fixed_cycles)
                score = (est, mt * nt * kt)
                if best is None or score < best[0]:
                    best = (score, GemmTiles(tm, tn, tk))
    if best is None:
        raise ValueError(f"no GEMM tiling of ({m}, {n}, {k}) fits a {bank_bytes}-byte bank")
    return best[1]
