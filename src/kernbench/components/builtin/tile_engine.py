"""PE_GEMM `tile_fpu_v1`: a tile matrix engine of the Tenstorrent Tensix kind.

Each issue multiplies a `rows` × `depth` block of the first operand by a `depth` × `cols`
block of the second (Tensix: 8 × 16 by 16 × 16, 2048 multiply-adds per cycle, tt-metal
tech_reports/matrix_engine). A product narrower than a block still costs the whole issue,
so an (m, n, k) tile takes

    ceil(m / rows) · ceil(k / depth) · ceil(n / cols) · passes(math_fidelity)

cycles, where LoFi is one pass and HiFi2 / HiFi3 / HiFi4 two, three and four. A 32 × 32 ×
32 tile therefore costs 16 / 32 / 48 / 64 cycles, the figures tt-metal's GEMM_FLOPS
report uses for its ideal cycles. The operand bitwidth does not change the rate: block
floats and bf16 are unpacked to the engine's own format before the multiply, and their
precision is what the fidelity passes trade against time.

Two optional spec values (both off by default) add what feeds the engine: with
`unpack_bytes_per_cycle` a 32 × 32 × 32 tile product takes at least the unpacker's time
for one 32 × 32 operand tile at the operand bits, and `tile_issue_cycles` adds a fixed
cost per tile product:

    n_tiles · (max(product cycles, tile bytes / unpack rate) + tile_issue_cycles)

with n_tiles = ceil(m / 32) · ceil(k / 32) · ceil(n / 32), rounded up to whole cycles.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kernbench.components.builtin.pe_gemm import PeGemm
from kernbench.components.catalog import register
from kernbench.config.schema import FIDELITY_PHASES

if TYPE_CHECKING:
    from kernbench.config.schema import PeGemmSpec


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tile_engine_cycles(m: int, n: int, k: int, rows: int, depth: int, cols: int,
                       fidelity: str) -> int:
    """Cycles of an (m, n, k) product on a rows × depth by depth × cols engine (module
    docstring); ValueError for a non-positive extent or an unknown fidelity."""
    for name, v in (("m", m), ("n", n), ("k", k), ("rows", rows), ("depth", depth),
                    ("cols", cols)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if fidelity not in FIDELITY_PHASES:
        raise ValueError(f"unknown math fidelity {fidelity!r} (known: {', '.join(FIDELITY_PHASES)})")
    return _ceil(m, rows) * _ceil(k, depth) * _ceil(n, cols) * FIDELITY_PHASES[fidelity]


@register("pe_gemm", "tile_fpu_v1")
class TileFpu(PeGemm):
    """The PE_GEMM engine with the tile-engine cycle count instead of the systolic one."""

    @classmethod
    def compute_cycles(cls, spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
        cycles = tile_engine_cycles(m, n, k, spec.rows, spec.depth, spec.cols,
                                    spec.math_fidelity)
        if spec.unpack_bytes_per_cycle is None and not spec.tile_issue_cycles:
            return cycles
        return fed_tile_cycles(spec, m, n, k, bits)


T = 32  # the tile edge the unpacker and the issue cost count in


def fed_tile_cycles(spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
    """Cycles of an (m, n, k) product counted per 32³ tile product with the unpacker's
    floor and the per-tile issue cost (module docstring)."""
    per = tile_engine_cycles(T, T, T, spec.rows, spec.depth, spec.cols, spec.math_fidelity)
    if spec.unpack_bytes_per_cycle is not None:
        per = max(per, T * T * bits / 8 / spec.unpack_bytes_per_cycle)
    tiles = _ceil(m, T) * _ceil(k, T) * _ceil(n, T)
    return math.ceil(tiles * (per + spec.tile_issue_cycles))
