"""ATTENTION split along the keys over PEs (flash-decoding, ADR-0714).

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
   other;
3. in a later lowering phase (the schedule derives HBM dependencies from program order),
   the owner loads every helper's outputs with one DMA and their states with another
   and folds them in with one VE_ATTN_COMBINE_TILE of `parts` = P - 1, in range order,
   dividing by l after the last (ADR-0723); then stores the output rows.
The interpreter computes the same ranges and combines (`numerics.flash.blocked_attention`
with `kv_parts`), so the program stays exact against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.attention_kv import Run, lower_kv_blocks, to_out_dtype
from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.numerics.flash import STATE_WIDTH, kv_part_bounds

if TYPE_CHECKING:  # a type only: attention imports this module
    from kernbench.compiler.lower.attention import AttentionTiles


class Scratch(NamedTuple):
    """The helpers' HBM slots: unnormalized output rows (D fp32 a row) and states (4)."""

    out: Placement
    state: Placement


def _slot_row(at: AttentionTiles, b: int, h: int, part: int, s0: int) -> int:
    """First scratch row of (batch b, head h, helper range `part` ≥ 1, query row s0)."""
    hq, s_len = at.q.shape[1], at.q.shape[2]
    return ((b * hq + h) * (at.kv_parts - 1) + part - 1) * s_len + s0


def _store_part(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, scratch: Scratch,
                b: int, part: int, run: Run) -> None:
    """A helper's unnormalized output rows and state into its scratch slots."""
    h, s0, s, st, o32, qq = run
    dv = at.v.shape[3]
    row = _slot_row(at, b, h, part, s0)
    lw.dma(True, pe, o32, scratch.out, row * dv, s, dv, dv, n.id, frees=[o32, qq])
    lw.dma(True, pe, st, scratch.state, row * STATE_WIDTH, s, STATE_WIDTH, STATE_WIDTH, n.id,
           frees=[st])


def _combine(lw: Lowering, n: LayerIR, at: AttentionTiles, pe: int, scratch: Scratch,
             b: int, run: Run) -> None:
    """The owner folds every helper's slot into its running output, then stores it: as
    many helpers a load and a VE_ATTN_COMBINE_TILE as fit a TCM bank (all of them in a
    decode step)."""
    h, s0, s, st, o32, qq = run
    dv, out, s_len = at.v.shape[3], at.out, at.q.shape[2]
    helpers = at.kv_parts - 1
    per = max(1, min(helpers, lw.bank // (s * dv * 4)))
    for p0 in range(1, at.kv_parts, per):
        parts = min(per, at.kv_parts - p0)
        row = _slot_row(at, b, h, p0, s0)
        po = lw.buf(pe, parts * s * dv * 4, f"{n.id}.part_o")
        lw.dma(False, pe, po, scratch.out, row * dv, parts, s * dv, s_len * dv, n.id)
        ps = lw.buf(pe, parts * s * STATE_WIDTH * 4, f"{n.id}.part_state")
        lw.dma(False, pe, ps, scratch.state, row * STATE_WIDTH, parts, s * STATE_WIDTH,
               s_len * STATE_WIDTH, n.id)
        lw.op("VE_ATTN_COMBINE_TILE", pe, n.id,
              {"length": dv, "rows": s, "qbits_activation": 32, "out_qbits": 32,
               "parts": parts, "last": p0 + parts == at.kv_parts, **lw.engines.ve(pe)},
              reads=[("in", po), ("part_state", ps), ("state", st), ("out", o32)],
              writes=[("out", o32), ("state", st)], frees=[po, ps])
    ob = to_out_dtype(lw, n, pe, o32, out.dtype, s, dv)
    at.store(lw, n, pe, ob, b, h, s0, s, [ob, st, qq])


def lower_kv_parts(lw: Lowering, n: LayerIR, at: AttentionTiles,
                   groups: list[tuple[int, int, int]]) -> None:
    """Every (batch b, KV group g, owner PE) of `groups` with its keys in `at.kv_parts`
    ranges (module doc)."""
    bsz, hq, s_len, _ = at.q.shape
    dv = at.v.shape[3]
    rows = bsz * hq * (at.kv_parts - 1) * s_len
    scratch = Scratch(
        lw.plan.allocate(f"{n.id}@kvparts", (rows, dv), "fp32", "scratch").placement(),
        lw.plan.allocate(f"{n.id}@kvparts_state", (rows, STATE_WIDTH), "fp32",
                         "scratch").placement())
    k = at.k
    owners: list[tuple[int, int, list[Run]]] = []
    bounds = kv_part_bounds(at.t_len, at.kv_parts, at.kv_first)
    assert len(bounds) == at.kv_parts, "kv_parts is set for at least one key per range"
    for b, g, owner in groups:
        for part, (lo, hi) in enumerate(bounds):
            pe = owner if part == 0 else lw.pe_near(
                k, b * k.strides[0] + g * k.strides[1] + lo * k.strides[2])
            runs = lower_kv_blocks(lw, n, at, pe, b, g, keys=(lo, hi), keep=True)
            if part == 0:
                owners.append((owner, b, runs))
            else:
                for run in runs:
                    _store_part(lw, n, at, pe, scratch, b, part, run)
    lw.phase()
    for owner, b, runs in owners:
        for run in runs:
            _combine(lw, n, at, owner, scratch, b, run)
