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

Split K: for an integer GEMM (int32 accumulators, so a sum of partial sums is
the same integer) the K steps of one output tile may be cut into `ks` parts (2 or 4) on
different PEs. A helper part stores its int32 partial sum; the owner loads each and adds
it before the epilogue. It is a candidate like any tile shape: the estimate counts
mt × nt × ks tiles in the waves, each over its part of K, plus the owner's serial
reduction (per partial, a load and an add) and one helper store. It is taken when its
estimate is at most `SPLIT_GAIN` of the best unsplit tiling's: the output has too few
tiles to fill the PEs' waves and K is long (a decode GEMM of one row).
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
    ks: int = 1  # K parts of one output tile, each on its own PE (split K)

    def counts(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        return math.ceil(m / self.tm), math.ceil(n / self.tn), math.ceil(k / self.tk)

    def k_parts(self, k: int) -> list[tuple[int, int]]:
        """(first, end) of each K part: whole K steps, as even as the steps allow."""
        steps = k_part_steps(math.ceil(k / self.tk), self.ks)
        return [(p * steps * self.tk, min(k, (p + 1) * steps * self.tk))
                for p in range(self.ks)]


#: the K-part counts the tiler tries for an integer GEMM
SPLIT_K = (2, 4)
#: split K is taken only when its estimate is at most this fraction of the best unsplit
#: tiling's: the estimate sees one layer, while a split also occupies the PEs that had no
#: tile (their weight prefetch for the next layers starts later) and adds HBM traffic.
#: Measured on gpt2-small seq 128 on `base`: an FC2 per cube estimated 11 % faster split
#: ran the model 1.2 % slower; a decode down projection estimated 28 % faster ran faster.
SPLIT_GAIN = 0.85


def k_part_steps(kt: int, ks: int) -> int:
    """K steps per part when `kt` steps are cut into `ks` parts."""
    return math.ceil(kt / ks)


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


def _estimate(tm: int, tn: int, tk: int, k_part: int, tiles: int, steps: int, ks: int,
              a_bytes: float, w_bytes: float, bpc: float, dma_fixed: float, rows: int,
              cols: int, dataflow: str, n_pes: int, engines: int) -> float:
    """Estimated cycles of the busiest PE: `tiles` tiles (K parts) of `k_part` in waves,
    plus, with `ks` > 1 parts, one helper store and the owner's loads and adds of the
    ks - 1 partial sums."""
    per_tile, first = _tile_cycles(tm, tn, tk, k_part, tm * a_bytes + tn * w_bytes,
                                   bpc, rows, cols, dataflow)
    est = first + math.ceil(tiles / (n_pes * engines)) * per_tile
    if ks > 1:
        partial = dma_fixed + (tm * tn * 4 / bpc if bpc else 0.0)
        est += partial + (ks - 1) * (partial + OP_OVERHEAD_CYCLES)
    if dma_fixed:
        # a PE's DMA read channel serves one transfer at a time: per tile an A and a W
        # load per K step and the epilogue's scale load and store (and with split K a
        # partial's store or load), each paying the fixed latency, however many engines
        est = max(est, math.ceil(tiles / n_pes) * (2 * steps + 2 + (ks > 1)) * dma_fixed)
    return est


@lru_cache(maxsize=1024)
def choose_gemm_tiles(m: int, n: int, k: int, *, a_bytes: float, w_bytes: float,
                      bank_bytes: int, tcm_bytes: int, rows: int, cols: int, dataflow: str,
                      n_pes: int, engines: int = 1, dma_bytes_per_cycle: float = 0.0,
                      dma_fixed_cycles: float = 0.0, split_k: bool = False,
                      acc_bytes: int = 4) -> GemmTiles:
    """The tile shape of an (m, n, k) GEMM on `n_pes` PEs of `engines` tensor engines
    each (see the module docstring); `split_k`: K parts over PEs are candidates too (an
    integer GEMM). ValueError when no candidate fits a bank."""
    best: list = [None, None]  # (score, tiles) of the best unsplit and split tiling
    for tn in _cands(n, (256, 128, 64, 32) + _balanced(n, n_pes, cols)):
        for tm in _cands(m, (1024, 512, 256, 128, 64, 32, 16) + _balanced(m, n_pes, rows)):
            c = tm * tn * acc_bytes
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
                for ks in (1, *SPLIT_K) if split_k else (1,):
                    steps = k_part_steps(kt, ks)
                    if ks > 1 and (math.ceil(kt / steps) != ks or math.ceil(
                            mt * nt * ks / n_pes) * c > tcm_bytes // 4):
                        # too few K steps for ks non-empty parts, or too many owners'
                        # accumulators held in TCM until the partial sums are added
                        continue
                    est = _estimate(tm, tn, tk, min(k, steps * tk), mt * nt * ks, steps,
                                    ks, a_bytes, w_bytes, dma_bytes_per_cycle,
                                    dma_fixed_cycles, rows, cols, dataflow, n_pes, engines)
                    score = (est, mt * nt * (kt + 3 * (ks - 1)))
                    b = best[ks > 1]
                    if b is None or score < b[0]:
                        best[ks > 1] = (score, GemmTiles(tm, tn, tk, ks))
    whole, split = best
    if whole is None:
        raise ValueError(f"no GEMM tiling of ({m}, {n}, {k}) fits a {bank_bytes}-byte bank")
    if split is not None and split[0][0] <= SPLIT_GAIN * whole[0][0]:
        return split[1]
    return whole[1]
