"""Split K's parts: the scratch of the partial sums, a helper's store
and an owner's adds, and the glue of the readiness placement (`gemm_balance`).

The scratch holds the output's rows with one block of N columns per helper slot. It is
spread over the cubes like the output; an unspread one has a copy per cube, a tile's slots
used in its owner's cube (the helpers store there, the owner loads locally). An owner of
one row loads all its slots with one strided DMA.
"""

from __future__ import annotations

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm_balance import (
    HOP_CYCLES,
    STEP_TRIP_CYCLES,
    KPart,
    OutTile,
    Producer,
    balanced_parts,
    equal_parts_end,
    producer_of,
)
from kernbench.compiler.tilegraph import Buf
from kernbench.compiler.tiling import GemmTiles
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_KINDS

#: per PE: the tiling and the parts it runs
PerPe = dict[int, tuple[GemmTiles, list[KPart]]]


def most_parts(per_pe: PerPe) -> int:
    """The most K parts any tile of `per_pe` is split into (1: none is split)."""
    return max((p.count(t.ks) for t, parts in per_pe.values() for p in parts), default=1)


def as_producer(lw: Lowering, per_pe: PerPe, k: int, bits: int,
                tensors: set[str]) -> Producer | None:
    """What this GEMM leaves for a split-K consumer (`gemm_balance.Producer`): per tile its
    K steps' array cycles plus a command round trip each."""
    cycles: dict[OutTile, int] = {}
    step: dict[tuple[int, int, int], int] = {}  # (tm, tn, tk) → one K step's cycles
    for t, parts in per_pe.values():
        for p in parts:
            _, _, tm, tn = p.tile
            total = 0
            for k0 in range(p.k0, p.k1, t.tk):
                key = (tm, tn, min(t.tk, k - k0))
                c = step.get(key)
                if c is None:
                    c = step[key] = gemm_cycles(lw.gemm_spec, *key, bits) + STEP_TRIP_CYCLES
                total += c
            cycles[p.tile] = total
    start = {pe: HOP_CYCLES * (lw.topo.pes[pe].cube.row + lw.topo.pes[pe].cube.col)
             for pe in per_pe}
    return producer_of(tensors, {pe: parts for pe, (_, parts) in per_pe.items()}, cycles,
                       start)


def balanced(lw: Lowering, t: GemmTiles, per_pe: PerPe, k: int, bits: int,
             producer: Producer, reduce_cols: int = 0) -> PerPe:
    """`per_pe`'s tiles with their K steps placed by `gemm_balance.balanced_parts` over
    every PE, when its estimate ends sooner than the equal parts'; else `per_pe`.
    `reduce_cols`: the row's columns when the lowering plan has one PE add the row up
    (`gemm_rowreduce`): a placement is then taken only when it keeps the reduction
    possible (at least two parts to a tile, every slot of the row in one TCM bank)."""
    tiles = sorted({p.tile for _, parts in per_pe.values() for p in parts})
    tm, tn = tiles[0][2], max(tile[3] for tile in tiles)
    cost = gemm_cycles(lw.gemm_spec, tm, tn, t.tk, bits) + STEP_TRIP_CYCLES
    placed, end = balanced_parts(tiles, k, t.tk, list(range(lw.n_pes)), producer, cost)
    equal = equal_parts_end({pe: parts for pe, (_, parts) in per_pe.items()}, t.tk,
                            producer, cost)
    if end >= equal:
        return per_pe
    if reduce_cols:
        slots = max((p.count(t.ks) for parts in placed.values() for p in parts), default=1)
        if slots < 2 or slots * reduce_cols * 4 > lw.bank:
            return per_pe
    return {pe: (t, parts) for pe, parts in placed.items()}


def partials(lw: Lowering, n: LayerIR, per_pe: PerPe, m: int, nn: int,
             spread: bool) -> Placement | None:
    """The int32 HBM scratch of a split-K GEMM's partial sums: the output's rows, one
    block of `nn` columns per helper slot, spread over the cubes like the output (`spread`)
    so that a part's partial sums stay in its cube; else, on several cubes, one copy per
    cube, a tile's slots used in its owner's cube (the helpers store there, the
    owner loads locally); None without split K. Each call gets its own scratch (a
    QKV_PROJ's three projections do not share one)."""
    slots = most_parts(per_pe) - 1
    if not slots:
        return None
    key = f"{n.id}@splitk{len(lw.plan.allocations)}"
    return lw.plan.allocate(key, (m, slots * nn), "int32", "scratch", spread=spread,
                            replicate=not spread and len(lw.topo.cubes) > 1).placement()


def store_partial(lw: Lowering, n: LayerIR, pe: int, c: Buf, part: KPart,
                  scratch: Placement, nn: int, owner_cube: int) -> None:
    """A helper's int32 partial sum into its slot, in the owner's cube's copy."""
    m0, n0, tm, tn = part.tile
    width = scratch.shape[1]
    lw.dma(True, pe, c, scratch, m0 * width + part.slot * nn + n0, tm, tn, width, n.id,
           frees=[c], cube=owner_cube)


def add_partials(lw: Lowering, n: LayerIR, pe: int, c: Buf, part: KPart, ks: int,
                 scratch: Placement, nn: int) -> Buf:
    """The owner's accumulator plus the partial sums of its ks - 1 helpers (int32,
    exact)."""
    m0, n0, tm, tn = part.tile
    width = scratch.shape[1]
    # one row: every slot's partial sums in one strided DMA (slots are nn apart), each
    # add reading its slot at an offset of that buffer
    together = tm == 1 and ks > 2
    if together:
        both = lw.buf(pe, (ks - 1) * tn * 4, f"{n.id}.partials")
        lw.dma(False, pe, both, scratch, m0 * width + n0, ks - 1, tn, nn, n.id)
    for slot in range(ks - 1):
        if together:
            bp, off = both, slot * tn * 4
        else:
            bp, off = lw.buf(pe, tm * tn * 4, f"{n.id}.partial"), 0
            lw.dma(False, pe, bp, scratch, m0 * width + slot * nn + n0, tm, tn, width, n.id)
        total = lw.buf(pe, tm * tn * 4, f"{n.id}.acc")
        last = slot == ks - 2
        add = lw.op("VE_ELEMENTWISE_TILE", pe, n.id,
                    {"op": "add", "cost": EW_KINDS["add"].cost,
                     "out_shape": [tm, tn], "out_dtype": "int32", "in_shape": [tm, tn],
                     "in_dtype": "int32", "in2_shape": [tm, tn], "in2_dtype": "int32",
                     **lw.engines.ve(pe)},
                    reads=[("in", c), ("in2", bp)], writes=[("out", total)],
                    frees=[c, bp] if last or not together else [c])
        if off:
            add.role_offset = {"in2": off}
        c = total
    return c
