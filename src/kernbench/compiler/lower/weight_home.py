"""Where a TE weight placed once lives: each column panel in the cube whose PEs read it
most (`MemoryPlan.replicate_constants` False, compiler.weights_fit).

A GEMM's output tiles are dealt to PEs before its first weight tile is loaded
(`gemm._tiles_per_pe`), so which cube reads which columns is known when the weight is
stored. Stored as column panels (`te_weights.panels`), the columns a cube's PEs compute
are whole panels: the weight is cut at panel boundaries, each run of panels into the
HBM of the cube that reads it most (bytes read, K steps × columns) and has room for it
(`MemoryPlan.room`). Among cubes that read a panel equally (a GEMM whose cubes each
compute their own rows over every column) the one with the most room takes it, so such
weights spread evenly instead of filling one cube first. A weight stored row-major
(`panel` 0) lives whole in the cube that reads most of it. A GEMM spread over every PE
then reads its weight locally, as from a replica, and the chip holds one copy.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ALIGN, ITEMSIZE, nbytes_of
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm_balance import KPart
from kernbench.compiler.lower.te_weights import panel_width, stored, stored_key
from kernbench.compiler.lower.values import TeWeight
from kernbench.compiler.tiling import GemmTiles


def _reads(lw: Lowering, wp: TeWeight,
           per_pe: dict[int, tuple[GemmTiles, list[KPart]]]) -> dict[int, dict[int, list[int]]]:
    """panel width → panel index → elements each cube's PEs read of that panel."""
    n_cubes = len(lw.topo.cubes)
    out: dict[int, dict[int, list[int]]] = {}
    for pe, (t, parts) in per_pe.items():
        panel = panel_width(wp, t.tn)
        cube = lw.cube(pe)
        reads = out.setdefault(panel, {})
        for part in parts:
            _, n0, _, tn = part.tile
            j = n0 // panel if panel else 0
            reads.setdefault(j, [0] * n_cubes)[cube] += (part.k1 - part.k0) * tn
    return out


def _home(lw: Lowering, wp: TeWeight, panel: int,
          reads: dict[int, list[int]]) -> list[tuple[int, int]]:
    """(end byte, cube) of each run of panels: in the cube that reads it most among
    those with room for it (`MemoryPlan.room`; the most room, then the lowest index,
    among equals), else in the one with the most room."""
    k, nn = wp.shape
    count = -(-nn // panel) if panel else 1
    isz = ITEMSIZE[wp.dtype]
    free = [lw.plan.room(c) for c in range(len(lw.topo.cubes))]
    cuts: list[tuple[int, int]] = []
    cube = start = 0
    for j in range(count):
        end = int(min((j + 1) * panel, nn) * k * isz) if j < count - 1 \
            else nbytes_of((k * nn,), wp.dtype)
        r = reads.get(j, [0] * len(free))
        nb = end - start + ALIGN  # a part's bytes, with its alignment at worst
        fits = [c for c in range(len(free)) if free[c] >= nb]
        if j in reads or cube not in fits:
            cube = max(fits, key=lambda c: (r[c], free[c], -c)) if fits \
                else free.index(max(free))
        free[cube] -= nb
        if cuts and cuts[-1][1] == cube:
            cuts[-1] = (end, cube)
        else:
            cuts.append((end, cube))
        start = end
    return cuts


def place_by_use(lw: Lowering, wp: TeWeight,
                 per_pe: dict[int, tuple[GemmTiles, list[KPart]]]) -> None:
    """Store `wp` in each panel layout its tiles read, by use, before the tiles are
    lowered (nothing to do when constants are replicated, or the weight is stored)."""
    if lw.plan.replicate_constants or wp.values is None or len(lw.topo.cubes) == 1:
        return
    for panel, reads in sorted(_reads(lw, wp, per_pe).items()):
        if stored_key(wp.values, panel) not in lw.plan.allocations:
            stored(lw, wp.values, panel, home=_home(lw, wp, panel, reads))
