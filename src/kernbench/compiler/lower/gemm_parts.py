"""How a GEMM's rows are cut into output tiles and each tile's K into parts, from the
shapes and the topology alone.

`range_tiles` is the tiling of one row range of a GEMM on the PEs of one cube (or all
PEs): the tiler's choice (`tiling.choose_gemm_tiles`), split further along K when one PE
will add the row up (`split`, for `gemm_rowreduce`). The GEMM's tiles (`gemm._tiles_per_pe`)
and the plan pass's row-reduce decision (`gemm_rowreduce.planned_norm`) both call it, so
they agree on the K parts; it reads no tile and no PE cursor.
"""

from __future__ import annotations

import math

from kernbench.compiler.hbm import BFP_FORMATS, ITEMSIZE
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm_balance import STEP_TRIP_CYCLES
from kernbench.compiler.tiling import GemmTiles, choose_gemm_tiles
from kernbench.components.builtin.pe_gemm import gemm_cycles

#: most K parts per output tile `split` tries, and the K granularity of a part
MAX_PARTS = 8
K_ALIGN = 32


def tcm_dtype(dtype: str) -> str:
    """The dtype a weight of `dtype` has in TCM: a block float is loaded decoded into
    bf16 (DMA_LOAD_TILE `block_float`)."""
    return "bf16" if dtype in BFP_FORMATS else dtype


def tcm_itemsize(dtype: str) -> float:
    """Bytes of one weight element in TCM (`tcm_dtype`)."""
    return ITEMSIZE[tcm_dtype(dtype)]


def acc_itemsize(a_dtype: str, w_dtype: str) -> int:
    """Bytes of one accumulator element: 8 (int64) with a 16-bit integer operand, else 4."""
    return 8 if "int16" in (a_dtype, w_dtype) else 4


def integer_operands(a_dtype: str, w_dtype: str) -> bool:
    """An integer accumulator, whose partial sums add up to the same int32 in any order:
    split K is a candidate."""
    return a_dtype in ("int8", "uint8") and w_dtype in ("int8", "int4")


def dma_fixed_ns(lw: Lowering) -> float:
    """The fixed cost of one HBM transfer of a PE's DMA: setup and the HBM latency."""
    cube = lw.topo.config.cube
    dma = cube.pe_template.pe_dma
    return dma.setup_cycles / dma.clock_ghz + cube.hbm_ctrl.latency_ns


def dma_peak_bytes_per_cycle(lw: Lowering) -> float:
    """One PE's own ceiling on loading from HBM, in bytes per matrix-engine cycle: its
    link to the router, or its DMA reader's rate when the topology sets one."""
    cs = lw.topo.config.cube
    dma = cs.pe_template.pe_dma
    gbs = cs.links.pe_router_bw_gbs
    if dma.hbm_read_bytes_per_cycle is not None:
        gbs = min(gbs, dma.hbm_read_bytes_per_cycle * dma.clock_ghz)
    return gbs / cs.pe_template.pe_gemm.clock_ghz


def memory_sharing_pes(lw: Lowering) -> int:
    """The PEs whose loads share one memory's bandwidth when a chip has one cube, so a
    GEMM on fewer PEs gives each loading PE a larger share; 0 (every PE at its
    all-loading share) on a chip of several cubes, whose storage the memory plan spreads
    over the cubes, so the loading PEs of one cube read the other parts over the
    cube-to-cube links and a larger share of their own cube's memory is not theirs."""
    cubes, chips = len(lw.topo.cubes), lw.topo.chips
    return lw.n_pes // cubes if cubes == chips else 0


def te_bits(a_dtype: str, w_dtype: str) -> int:
    """The operand bits a TE tile of these operands is priced at: the wider one's, as
    they lie in TCM (a block-float weight as bf16)."""
    return max(round(ITEMSIZE[a_dtype] * 8), round(tcm_itemsize(w_dtype) * 8))


def range_tiles(lw: Lowering, a_dtype: str, w_dtype: str, w_bits: int, rows: int, nn: int,
                k: int, cube: int | None, row_reduce: bool = False) -> GemmTiles:
    """The tiles of `rows` rows of a GEMM with `nn` columns and `k` K on the PEs of `cube`
    (None: every PE), activation `a_dtype` and weight `w_dtype` of `w_bits` bits.
    `row_reduce`: one PE will add the partial sums up (`gemm_rowreduce`), so an unsplit
    one-row tiling may be split for it (`split`)."""
    g = lw.gemm_spec
    n_pes = lw.pes_of(cube)
    integer = integer_operands(a_dtype, w_dtype)
    t = choose_gemm_tiles(rows, nn, k, a_bytes=ITEMSIZE[a_dtype],
                          w_bytes=tcm_itemsize(w_dtype), bank_bytes=lw.bank,
                          tcm_bytes=lw.tcm_bytes, rows=g.rows, cols=g.cols,
                          dataflow=g.dataflow, n_pes=n_pes, engines=lw.engines.te_count,
                          dma_bytes_per_cycle=lw.dma_bytes_per_cycle,
                          dma_fixed_cycles=dma_fixed_ns(lw) * g.clock_ghz,
                          split_k=integer, acc_bytes=acc_itemsize(a_dtype, w_dtype),
                          engine=g, bits=te_bits(a_dtype, w_dtype),
                          w_load_bytes=ITEMSIZE[w_dtype],
                          dma_peak_bytes_per_cycle=dma_peak_bytes_per_cycle(lw),
                          share_pes=memory_sharing_pes(lw))
    if row_reduce and integer and t.ks == 1 and rows <= t.tm:
        t = split(lw, t, math.ceil(nn / t.tn), k, w_bits, n_pes,
                  (ITEMSIZE[a_dtype], tcm_itemsize(w_dtype)))
    return t


def range_parts(t: GemmTiles, r_lo: int, r_hi: int, nn: int,
                k: int) -> list[tuple[tuple[int, int, int, int], int, int, int]]:
    """(output tile (m0, n0, tm, tn), part index, first K, end K) of every K part of the
    output tiles of rows `r_lo` .. `r_hi` tiled as `t`, in the order the GEMM deals them
    to PEs (each draws one). The GEMM's tiles and the plan pass's count of the PEs a
    layer draws both call it."""
    parts = t.k_parts(k)
    return [((m0, n0, min(t.tm, r_hi - m0), min(t.tn, nn - n0)), i, k0, k1)
            for m0 in range(r_lo, r_hi, t.tm) for n0 in range(0, nn, t.tn)
            for i, (k0, k1) in enumerate(parts)]


def split(lw: Lowering, t: GemmTiles, tiles: int, k: int, bits: int, n_pes: int,
          itemsizes: tuple[float, float] = (1, 1)) -> GemmTiles:
    """The K parts per tile of a one-row GEMM that will be reduced on one PE: the
    reduction is paid anyway (it replaces the norm's gather), so the parts are chosen by
    the tensor engines' estimated time alone: waves of parts over the PEs' engines, each
    part one K step of its array cycles plus a command round trip. `t` (as the tiler
    chose it) stands unless a split is estimated faster. A part is one K step, so its A
    and W tiles (`itemsizes`: bytes of an A and a W element in TCM) must each fit a TCM
    bank, as the tiler's do: a long K (a 405B model's MLP) leaves only the splits with
    enough parts."""
    engines = n_pes * lw.engines.te_count
    spec = lw.gemm_spec

    def est(tk: int, parts: int) -> int:
        steps = math.ceil(k / tk) // parts  # K steps per part
        waves = math.ceil(tiles * parts / engines)
        return waves * steps * (gemm_cycles(spec, t.tm, t.tn, tk, bits) + STEP_TRIP_CYCLES)

    best, out = est(t.tk, t.ks), t
    for ks in range(2, MAX_PARTS + 1):
        if ks * tiles * t.tn * 4 > lw.bank:
            break  # the reducer loads every slot of the row into one TCM bank
        tk = math.ceil(k / ks / K_ALIGN) * K_ALIGN
        if tk >= k or math.ceil(k / tk) != ks:
            continue
        if max(t.tm * tk * itemsizes[0], tk * t.tn * itemsizes[1]) > lw.bank:
            continue
        e = est(tk, ks)
        if e < best:
            best, out = e, GemmTiles(t.tm, t.tn, tk, ks)
    return out
