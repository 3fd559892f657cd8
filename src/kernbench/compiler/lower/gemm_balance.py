"""Split-K parts sized by when each PE is free and each K step's input is ready.

A decode step's GEMMs run one row: their tiles are single array folds, and a layer with
more tiles than PEs leaves a second, partial wave. gpt2-small's FC1 has 96 one-fold tiles
on 64 PEs, so 32 PEs work twice as long as the others. Its consumer, FC2 (K = 3072,
split K), cut each tile's K steps into equal parts round robin from PE 0; the parts on
the 32 busy PEs started a tile later and set the layer's end.

When a split-K GEMM of one row tile reads, as its K axis, the columns another GEMM just
stored (`Producer`, recorded by that GEMM's lowering: the same storage, so each K step
is ready when its producer tiles are), this module places the K steps instead:

- each K step r of each output tile is a unit of `step_cycles` (its array folds plus a
  command round trip); it is ready when the producer's tiles covering K rows
  [r·tk, (r+1)·tk) are done (`Producer.ready`);
- each PE is free when its own producer tiles are done (`Producer.busy`);
- units in order of (ready, tile, step) are dealt to PEs in order of (free, index): a PE
  takes units while it finishes by the target T; the smallest T that places every unit
  is found by bisection (a list schedule on the compiler's cycle estimate);
- a PE's consecutive units of one tile are one part; the part estimated to end last owns
  the tile (its partial sum is never stored and loaded: the others' are added to it), the
  others are helpers with slots 0, 1, ... (`KPart.parts`: how many).

It is used only when the estimate beats the equal parts' own estimate under the same
model; otherwise the round robin stands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

#: place split-K parts by readiness when a producer is known (False: equal parts round
#: robin; `benchmarks/decode_ablation.py` measures both)
BALANCE = True

#: an output tile: (first row, first column, rows, columns)
OutTile = tuple[int, int, int, int]

#: cycles a K step pays besides its array folds in the estimate: the command round trip
#: between two TE_GEMM_TILE entries of a PE
STEP_TRIP_CYCLES = 60
#: cycles a PE starts later per UCIe hop between its cube and cube 0, where a one-row
#: activation lives: loads and command trips cross the UCIe, so a remote cube's tiles end
#: later than cube 0's, the farther the later
HOP_CYCLES = 330


class KPart(NamedTuple):
    """One PE's share of an output tile: its K steps [k0, k1). `slot` -1: the owner,
    whose accumulator goes through the epilogue (after it has added the partial sums of
    slots 0 .. parts - 2 when the tile is split); `slot` >= 0: a helper, whose int32
    partial sum is stored into that slot of the split-K scratch. `parts`: the tile's part
    count when it is not the GEMM's `GemmTiles.ks` (0: it is)."""

    tile: OutTile
    k0: int
    k1: int
    slot: int = -1
    parts: int = 0

    def count(self, ks: int) -> int:
        """The tile's part count, given the GEMM's `ks`."""
        return self.parts or ks


@dataclass
class Producer:
    """What a just-lowered GEMM leaves for the next one: the storage its tiles write as
    the next GEMM reads it (the quantized copy its epilogue stores, else its output; a
    consumer whose activation is made by a pass of its own, such as a whole-row
    quantize, reads another storage and is not balanced), per PE the
    estimated cycles of its tensor-engine work (`busy`), and per output column tile the
    cycle its PE finishes it (`cols`: (first column, end column, cycle))."""

    tensors: frozenset[str]
    busy: dict[int, int] = field(default_factory=dict)
    cols: list[tuple[int, int, int]] = field(default_factory=list)

    def ready(self, k0: int, k1: int) -> int:
        """The cycle by which every column in [k0, k1) is computed."""
        return max((c for a, b, c in self.cols if a < k1 and k0 < b), default=0)


def producer_of(tensors: set[str], per_pe: dict[int, list[KPart]],
                cycles_of: dict[OutTile, int], start: dict[int, int]) -> Producer | None:
    """The `Producer` of a GEMM whose PEs run `per_pe`'s parts in order from cycle
    `start[pe]` (whole tiles only: a split-K producer's columns are ready only after its
    owners' adds, which this estimate does not follow)."""
    p = Producer(frozenset(tensors))
    for pe, parts in per_pe.items():
        t = start.get(pe, 0)
        for part in parts:
            if part.slot >= 0 or part.parts > 1:
                return None
            t += cycles_of[part.tile]
            _, n0, _, tn = part.tile
            p.cols.append((n0, n0 + tn, t))
        p.busy[pe] = t
    return p


def _finish(order: list[int], ready: list[int], pes: list[int], free: dict[int, int],
            cost: int, target: int) -> list[list[tuple[int, int]]] | None:
    """Units (indices into `ready`, in `order`) dealt to `pes` in order, each PE taking
    units while it ends by `target`; per PE its (unit index, end cycle), or None when
    some unit is left over."""
    out: list[list[tuple[int, int]]] = []
    i = 0
    for pe in pes:
        t, mine = free.get(pe, 0), []
        while i < len(order) and max(t, ready[order[i]]) + cost <= target:
            t = max(t, ready[order[i]]) + cost
            mine.append((order[i], t))
            i += 1
        out.append(mine)
    return out if i == len(order) else None


def equal_parts_end(per_pe: dict[int, list[KPart]], tk: int, producer: Producer,
                    cost: int) -> int:
    """The estimated end of the round robin's parts under the same model (each PE its
    parts in order, each K step when its input is ready)."""
    end = 0
    for pe, parts in per_pe.items():
        t = producer.busy.get(pe, 0)
        for part in sorted(parts, key=lambda p: p.slot < 0):  # helpers first, as lowered
            for k0 in range(part.k0, part.k1, tk):
                t = max(t, producer.ready(k0, min(k0 + tk, part.k1))) + cost
        end = max(end, t)
    return end


def balanced_parts(tiles: list[OutTile], k: int, tk: int, pes: list[int], producer: Producer,
                   cost: int) -> tuple[dict[int, list[KPart]], int]:
    """Each tile's K steps over `pes` (module doc): per PE its parts in the order it runs
    them, and the estimated end (cycles)."""
    kt = math.ceil(k / tk)
    units = [(producer.ready(r * tk, min(k, (r + 1) * tk)), ti, r)
             for ti in range(len(tiles)) for r in range(kt)]
    order = sorted(range(len(units)), key=units.__getitem__)
    ready = [u[0] for u in units]
    by_free = sorted(pes, key=lambda pe: (producer.busy.get(pe, 0), pe))
    lo = min(producer.busy.get(pe, 0) for pe in pes) + cost
    hi = max(producer.busy.values(), default=0) + max(u[0] for u in units) + len(units) * cost
    while lo < hi:  # the smallest target that places every unit
        mid = (lo + hi) // 2
        if _finish(order, ready, by_free, producer.busy, cost, mid) is None:
            lo = mid + 1
        else:
            hi = mid
    dealt = _finish(order, ready, by_free, producer.busy, cost, lo)
    assert dealt is not None
    # pe → [tile, first step, end step, end cycle] of each run of one tile's steps
    runs: dict[int, list[list[int]]] = {}
    for pe, mine in zip(by_free, dealt, strict=True):
        for idx, end in mine:
            _, ti, r = units[idx]
            cur = runs.setdefault(pe, [])
            if cur and cur[-1][0] == ti and cur[-1][2] == r:
                cur[-1][2:] = [r + 1, end]
            else:
                cur.append([ti, r, r + 1, end])
    # the owner is the part estimated to end last (highest PE on a tie): its partial sum is
    # never stored, the others' are added to it
    owner: dict[int, tuple[int, int, int]] = {}  # tile → (end, pe, first step)
    count: dict[int, int] = {}
    for pe in sorted(runs):
        for ti, r0, _, end in runs[pe]:
            count[ti] = count.get(ti, 0) + 1
            owner[ti] = max(owner.get(ti, (end, pe, r0)), (end, pe, r0))
    slots: dict[int, int] = {}
    out: dict[int, list[KPart]] = {}
    for pe in sorted(runs):
        for ti, r0, r1, _ in runs[pe]:
            if owner[ti][1:] == (pe, r0):
                slot = -1
            else:
                slot = slots.get(ti, 0)
                slots[ti] = slot + 1
            out.setdefault(pe, []).append(
                KPart(tiles[ti], r0 * tk, min(k, r1 * tk), slot, count[ti]))
    return out, lo
