"""Which PEs a GEMM's rows go to on a chip of several cubes: the home cube's, each part's
cube's (an output spread by rows), or every PE (`gemm_ranges`). The estimates weigh the
tensor engines' waves, the weight read from each cube's copy and the UCIe traffic.
"""

from __future__ import annotations

import math

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.values import TeWeight
from kernbench.components.builtin.pe_gemm import gemm_cycles

#: cycles a GEMM spread over every cube pays for reaching remote cubes, in the choice of
#: `wide`: each op of a tile's chain (scale, A and W loads, TE, epilogue, store) waits
#: longer for its command and completion trips to a remote cube than in cube 0, and the
#: first A load crosses the UCIe. A larger value keeps a decode output projection in one
#: cube where spreading it runs faster
REMOTE_START_CYCLES = 500


def _te_cycles(lw: Lowering, m: int, nn: int, k: int, pes: int, bits: int) -> float:
    """Tensor-engine cycles of an (m, nn, k) GEMM on `pes` PEs: array-sized output tiles
    in waves over the PEs' engines, each tile at its systolic cycles (so a GEMM of one
    row costs what its array folds cost, not its MACs at the peak rate)."""
    spec = lw.gemm_spec
    tm, tn = min(m, spec.rows), min(nn, spec.cols)
    tiles = math.ceil(m / tm) * math.ceil(nn / tn)
    waves = math.ceil(tiles / (pes * lw.engines.te_count))
    return waves * gemm_cycles(spec, tm, tn, k, bits)


def _one_cube_cycles(lw: Lowering, bits: int, w_bytes: float, m: int, nn: int, k: int,
                     cube: int) -> float:
    """Estimated cycles of `m` rows of a GEMM on the PEs of `cube` alone: tensor-engine
    cycles, or the whole weight read from that cube's copy when longer."""
    cube_bpc = lw.dma_bytes_per_cycle * lw.pes_of(cube)
    return max(_te_cycles(lw, m, nn, k, lw.pes_of(cube), bits), w_bytes / cube_bpc)


def _all_cubes_cycles(lw: Lowering, a_dtype: str, bits: int, w_bytes: float, m: int,
                      nn: int, k: int) -> float:
    """Estimated cycles of a GEMM on every PE: tensor-engine cycles, each cube reading
    its share of the weight from its own copy, or A and the output crossing the UCIe
    links, plus the remote cubes' later start."""
    cubes = len(lw.topo.cubes)
    cube_bpc = lw.dma_bytes_per_cycle * lw.pes_of(0)
    remote = (m * k * ITEMSIZE[a_dtype] + m * nn * 4) * (cubes - 1) / cubes
    return max(_te_cycles(lw, m, nn, k, lw.n_pes, bits), w_bytes / (cube_bpc * cubes),
               remote / lw.ucie_bytes_per_cycle) + REMOTE_START_CYCLES


def _bits(a_dtype: str) -> int:
    return {"int8": 8, "int4": 8, "fp16": 16, "bf16": 16}.get(a_dtype, 32)


def wide(lw: Lowering, a_dtype: str, w_dtype: str, m: int, nn: int, k: int) -> bool:
    """Should a GEMM whose output lives in one cube spread over every cube? Yes when the
    estimated time on all PEs (tensor-engine cycles, the weight read from every cube's
    copy, A and the output crossing the UCIe links) beats the time on the home cube's PEs
    alone. `nn`: all the layer's output columns (a QKV_PROJ's three projections)."""
    w_bytes = k * nn * ITEMSIZE[w_dtype]
    bits = _bits(a_dtype)
    return _all_cubes_cycles(lw, a_dtype, bits, w_bytes, m, nn, k) \
        < _one_cube_cycles(lw, bits, w_bytes, m, nn, k, 0)


def by_rows(lw: Lowering, a_dtype: str, w_dtype: str,
            ranges: list[tuple[int, int, int | None]], nn: int, k: int) -> bool:
    """Should a GEMM whose output rows are spread over the cubes keep each cube's rows on
    that cube's PEs? Each cube then reads the whole weight from its own copy. No when that
    read bounds a cube's time (more cycles than its tensor engines' on its rows: a decode
    step of a few rows a cube) and every PE computing all rows on its own columns is
    estimated faster (`wide`'s estimate); a cube bound by its tensor engines keeps its
    rows (the estimate sees no command trips to remote cubes nor stores across them)."""
    w_bytes = k * nn * ITEMSIZE[w_dtype]
    bits = _bits(a_dtype)
    m = max(hi for _, hi, _ in ranges)
    weight_bound = any(w_bytes / (lw.dma_bytes_per_cycle * lw.pes_of(cube))
                       > _te_cycles(lw, hi - lo, nn, k, lw.pes_of(cube), bits)
                       for lo, hi, cube in ranges)
    t_rows = max(_one_cube_cycles(lw, bits, w_bytes, hi - lo, nn, k, cube)
                 for lo, hi, cube in ranges)
    return not weight_bound or t_rows <= _all_cubes_cycles(lw, a_dtype, bits, w_bytes, m,
                                                           nn, k)


def gemm_ranges(lw: Lowering, a_dtype: str, wp: TeWeight, op: Placement, m: int, nn: int,
                k: int, nn_layer: int) -> list[tuple[int, int, int | None]]:
    """(first row, end row, cube) of the row ranges whose tiles go to one cube's PEs (cube
    None: over every PE): the output's parts (`Lowering.part_rows`) unless every PE is
    estimated faster (`wide`, `by_rows`). `a_dtype`: the activation as the TE reads it."""
    ranges = lw.part_rows(op, m, nn)
    if len(ranges) == 1 and ranges[0][2] is not None:
        if wide(lw, a_dtype, wp.dtype, m, nn_layer, k):
            return [(0, m, None)]
    elif len(ranges) > 1 and not by_rows(lw, a_dtype, wp.dtype, ranges, nn_layer, k):
        return [(0, m, None)]
    return ranges


def spread_scratch(ranges: list[tuple[int, int, int | None]]) -> bool:
    """Is a split-K scratch spread over the cubes like the output (its rows computed
    in their cubes), not one copy per cube?"""
    return len(ranges) > 1
