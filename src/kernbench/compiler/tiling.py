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

The estimate prices what the hardware does: a tile's compute is the cycles of
the PE's own matrix engine (`pe_gemm.gemm_cycles`, its registered timing model, when the
caller names the engine), a weight load moves the weight's bytes as stored in memory (a
block float's, not the bf16 it decodes into in TCM), and when fewer tiles than PEs load
at once each loading PE gets `bpc × PEs / loading PEs` of its memory (the PEs sharing
one memory: a cube's, `share_pes`), up to its own ceiling (`dma_peak_bytes_per_cycle`):
a GEMM on a few PEs with large tiles reads each operand fewer times than one spread
thinly over every PE, and the estimate sees it.

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

from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.components.builtin.systolic import systolic_compute_cycles
from kernbench.config.schema import PeGemmSpec

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


@lru_cache(maxsize=16)
def _engine(key: str) -> PeGemmSpec:
    return PeGemmSpec.model_validate_json(key)


@lru_cache(maxsize=4096)
def _engine_cycles(m: int, n: int, k: int, engine: str, bits: int) -> int:
    return gemm_cycles(_engine(engine), m, n, k, bits)


@dataclass(frozen=True)
class _Engine:
    """How a tile's compute is priced: the named engine's timing model at `bits`
    (`engine` its spec as JSON, hashable for the caches), or else the systolic formula
    of `rows` × `cols` in `dataflow`."""

    rows: int
    cols: int
    dataflow: str
    engine: str | None = None
    bits: int = 8

    def cycles(self, m: int, n: int, k: int) -> int:
        if self.engine is None:
            return _cycles(m, n, k, self.rows, self.cols, self.dataflow)
        return _engine_cycles(m, n, k, self.engine, self.bits)


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
                 bpc: float, eng: _Engine) -> tuple[float, float]:
    """(pipelined cycles of one output tile's K loop, cycles of its first load)."""
    full, rest = divmod(k, tk)
    total = 0.0
    first = load_bytes_per_k * tk / bpc if bpc else 0.0
    for size, count in ((tk, full), (rest, 1 if rest else 0)):
        if not count:
            continue
        compute = eng.cycles(tm, tn, size) + OP_OVERHEAD_CYCLES
        load = load_bytes_per_k * size / bpc if bpc else 0.0
        total += count * max(compute, load)
    return total, first


def _estimate(tm: int, tn: int, tk: int, k_part: int, tiles: int, steps: int, ks: int,
              a_bytes: float, w_bytes: float, bpc: float, dma_fixed: float, eng: _Engine,
              n_pes: int, engines: int, peak_bpc: float = 0.0, share: int = 0) -> float:
    """Estimated cycles of the busiest PE: `tiles` tiles (K parts) of `k_part` in waves,
    plus, with `ks` > 1 parts, one helper store and the owner's loads and adds of the
    ks - 1 partial sums. `bpc`: a PE's load rate when every PE loads; with fewer tiles
    than the `share` PEs of one memory (the first PEs take the tiles), the loading PEs
    share its bandwidth, each up to `peak_bpc`."""
    if bpc and peak_bpc > bpc and tiles < share:
        bpc = min(peak_bpc, bpc * share / tiles)
    per_tile, first = _tile_cycles(tm, tn, tk, k_part, tm * a_bytes + tn * w_bytes, bpc, eng)
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


def choose_gemm_tiles(m: int, n: int, k: int, *, a_bytes: float, w_bytes: float,
                      bank_bytes: int, tcm_bytes: int, rows: int, cols: int, dataflow: str,
                      n_pes: int, engines: int = 1, dma_bytes_per_cycle: float = 0.0,
                      dma_fixed_cycles: float = 0.0, split_k: bool = False,
                      acc_bytes: int = 4, engine: PeGemmSpec | None = None, bits: int = 8,
                      w_load_bytes: float | None = None,
                      dma_peak_bytes_per_cycle: float = 0.0, share_pes: int = 0) -> GemmTiles:
    """The tile shape of an (m, n, k) GEMM on `n_pes` PEs of `engines` tensor engines
    each (see the module docstring); `split_k`: K parts over PEs are candidates too (an
    integer GEMM). `w_bytes`: a weight element's bytes in TCM; `w_load_bytes`: as loaded
    from memory (None: the same). `engine`: the matrix engine whose timing model prices
    a tile at `bits`-bit operands (None: the `rows` × `cols` systolic formula).
    `dma_peak_bytes_per_cycle`: one PE's own ceiling on loads, `share_pes` the PEs that
    share one memory's bandwidth (0: `dma_bytes_per_cycle` whatever the PEs loading).
    ValueError when no candidate fits a bank."""
    eng = _Engine(rows, cols, dataflow, None if engine is None else engine.model_dump_json(),
                  bits)
    return _choose(m, n, k, a_bytes, w_bytes, w_bytes if w_load_bytes is None else w_load_bytes,
                   bank_bytes, tcm_bytes, eng, n_pes, engines, dma_bytes_per_cycle,
                   dma_fixed_cycles, split_k, acc_bytes, dma_peak_bytes_per_cycle,
                   min(share_pes, n_pes))


@lru_cache(maxsize=1024)
def _choose(m: int, n: int, k: int, a_bytes: float, w_bytes: float, w_load: float,
            bank_bytes: int, tcm_bytes: int, eng: _Engine, n_pes: int, engines: int,
            dma_bytes_per_cycle: float, dma_fixed_cycles: float, split_k: bool,
            acc_bytes: int, peak_bpc: float, share: int) -> GemmTiles:
    best: list = [None, None]  # (score, tiles) of the best unsplit and split tiling
    rows, cols = eng.rows, eng.cols
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
                                    ks, a_bytes, w_load, dma_bytes_per_cycle,
                                    dma_fixed_cycles, eng, n_pes, engines, peak_bpc, share)
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


choose_gemm_tiles.cache_clear = _choose.cache_clear  # type: ignore[attr-defined]
