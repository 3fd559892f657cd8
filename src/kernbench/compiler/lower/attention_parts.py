"""ATTENTION split along the keys over PEs (flash-decoding).

A decode step has a few query rows per (batch, KV group) and many keys: one PE per group
leaves most of a large NPU idle while its tensor engine runs one-row folds over the whole
cache. With `kv_parts` = P the keys of each group are cut into P ranges
(`numerics.flash.kv_part_bounds`); range p runs the KV-block loop of `attention_kv` on a
PE of its own, in the cube holding those keys, from a fresh running state, and keeps its
output unnormalized:
1. the owner (range 0, on the PE the unsplit layer would use) keeps its output and
   state in TCM;
2. every helper stores its output rows (rows × D fp32) and state (rows × 4 fp32) into two
   HBM scratches, one slot per (batch, head, range), the ranges of a head next to each
   other. The scratches of a group live in the HBM of its owner's cube, where
   its helpers run too (they are placed by their keys, which are in that cube when the
   cache is spread), so neither the stores nor the owner's loads cross the UCIe;
3. in a later lowering phase (the schedule derives HBM dependencies from program order),
   the owner loads every helper's outputs with one DMA and their states with another
   and folds them in with one VE_ATTN_COMBINE_TILE of `parts` = P - 1, in range order,
   dividing by l after the last; then stores the output rows.
The interpreter computes the same ranges and combines (`numerics.flash.blocked_attention`
with `kv_parts`), so the program stays exact against it.
"""

from __future__ import annotations

from typing import NamedTuple

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.attention_kv import Run, lower_kv_blocks, to_out_dtype
from kernbench.compiler.lower.attention_tiles import AttentionTiles
from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.numerics.flash import STATE_WIDTH, kv_part_bounds


class Scratch(NamedTuple):
    """A group's helper slots: unnormalized output rows (D fp32 a row) and states (4),
    from row `row0` of two HBM scratches in its owner's cube."""

    out: Placement
    state: Placement
    row0: int


def _slot_row(at: AttentionTiles, scratch: Scratch, h: int, part: int, s0: int,
              heads: int) -> int:
    """Scratch row of head h's helper range `part` ≥ 1 at query row s0 (the group's heads
    in order, each head's ranges next to each other); with `heads` > 1 (the group's
    heads packed, one query row) the first of the range's `heads` rows, a row per head,
    the ranges one after the other."""
    if heads > 1:
        return scratch.row0 + (part - 1) * heads
    rep = at.q.shape[1] // at.k.shape[1]
    return scratch.row0 + ((h % rep) * (at.kv_parts - 1) + part - 1) * at.q.shape[2] + s0


def _part_rows(at: AttentionTiles, heads: int) -> int:
    """Scratch rows from one helper range's slot to the next range's, for one head (or
    for the packed heads)."""
    return heads if heads > 1 else at.q.shape[2]


def _scratches(lw: Lowering, n: LayerIR, at: AttentionTiles,
               groups: list[tuple[int, int, int]]) -> dict[tuple[int, int], Scratch]:
    """Per (batch, KV group) its slots: one pair of scratches per owner cube, each group's
    rows after the previous group's of that cube."""
    hq, s_len = at.q.shape[1], at.q.shape[2]
    dv = at.v.shape[3]
    rows_per_group = hq // at.k.shape[1] * (at.kv_parts - 1) * s_len
    by_cube: dict[int, list[tuple[int, int]]] = {}
    for b, g, owner in groups:
        by_cube.setdefault(lw.topo.pes[owner].cube.index, []).append((b, g))
    out: dict[tuple[int, int], Scratch] = {}
    for cube, mine in sorted(by_cube.items()):
        rows = len(mine) * rows_per_group
        suffix = f"@{cube}" if cube else ""
        o = lw.plan.allocate(f"{n.id}@kvparts{suffix}", (rows, dv), "fp32", "scratch",
                             cube=cube).placement()
        st = lw.plan.allocate(f"{n.id}@kvparts_state{suffix}", (rows, STATE_WIDTH), "fp32",
                              "scratch", cube=cube).placement()
        for i, bg in enumerate(mine):
            out[bg] = Scratch(o, st, i * rows_per_group)
    return out


def _store_part(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, scratch: Scratch,
                part: int, run: Run) -> None:
    """A helper's unnormalized output rows and state into its scratch slots."""
    h, s0, s, st, o32, qq, heads = run
    dv = at.v.shape[3]
    row = _slot_row(at, scratch, h, part, s0, heads)
    rows = s * heads
    lw.dma(True, pe, o32, scratch.out, row * dv, rows, dv, dv, n.id, frees=[o32, qq])
    lw.dma(True, pe, st, scratch.state, row * STATE_WIDTH, rows, STATE_WIDTH, STATE_WIDTH,
           n.id, frees=[st])


def _combine(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, scratch: Scratch,
             b: int, run: Run) -> None:
    """The owner folds every helper's slot into its running output, then stores it: as
    many helpers a load and a VE_ATTN_COMBINE_TILE as fit a TCM bank (all of them in a
    decode step)."""
    h, s0, s1, st, o32, qq, heads = run
    dv, out = at.v.shape[3], at.out
    s = s1 * heads  # rows of the tiles
    step = _part_rows(at, heads)
    helpers = at.kv_parts - 1
    per = max(1, min(helpers, lw.bank // (s * dv * 4)))
    for p0 in range(1, at.kv_parts, per):
        parts = min(per, at.kv_parts - p0)
        row = _slot_row(at, scratch, h, p0, s0, heads)
        po = lw.buf(pe, parts * s * dv * 4, f"{n.id}.part_o")
        lw.dma(False, pe, po, scratch.out, row * dv, parts, s * dv, step * dv, n.id)
        ps = lw.buf(pe, parts * s * STATE_WIDTH * 4, f"{n.id}.part_state")
        lw.dma(False, pe, ps, scratch.state, row * STATE_WIDTH, parts, s * STATE_WIDTH,
               step * STATE_WIDTH, n.id)
        lw.op("VE_ATTN_COMBINE_TILE", pe, n.id,
              {"length": dv, "rows": s, "qbits_activation": 32, "out_qbits": 32,
               "parts": parts, "last": p0 + parts == at.kv_parts, **lw.engines.ve(pe)},
              reads=[("in", po), ("part_state", ps), ("state", st), ("out", o32)],
              writes=[("out", o32), ("state", st)], frees=[po, ps])
    ob = to_out_dtype(lw, n, pe, o32, out.dtype, s, dv)
    at.store(lw, n, pe, ob, b, h, s0, s1, [ob, st, qq], heads)


def lower_kv_parts(lw: Lowering, n: LayerIR, at: AttentionTiles,
                   groups: list[tuple[int, int, int]]) -> None:
    """Every (batch b, KV group g, owner PE) of `groups` with its keys in `at.kv_parts`
    ranges (module doc)."""
    scratches = _scratches(lw, n, at, groups)
    k = at.k
    owners: list[tuple[int, int, Scratch, list[Run]]] = []
    bounds = kv_part_bounds(at.t_len, at.kv_parts, at.kv_first)
    assert len(bounds) == at.kv_parts, "kv_parts is set for at least one key per range"
    for b, g, owner in groups:
        for part, (lo, hi) in enumerate(bounds):
            pe = owner if part == 0 else lw.pe_near(
                k, b * k.strides[0] + g * k.strides[1] + lo * k.strides[2])
            runs = lower_kv_blocks(lw, n, at, pe, b, g, keys=(lo, hi), keep=True)
            if part == 0:
                owners.append((owner, b, scratches[b, g], runs))
            else:
                for run in runs:
                    _store_part(lw, n, at, pe, scratches[b, g], part, run)
    lw.phase()
    for owner, b, scratch, runs in owners:
        for run in runs:
            _combine(lw, n, at, owner, scratch, b, run)
