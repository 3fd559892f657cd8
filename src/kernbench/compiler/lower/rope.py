"""ROPE (rotate-half rotary embedding) as VE_ROPE_TILE row blocks over the PEs.

The IR's ROPE is y = x·cos + rotate_half(x)·sin over the last axis (head_dim D) with
full-width cos / sin tables broadcast to x (numerics.rope). VE_ROPE_TILE takes one table
row of D/2 angles per row and repeats it for both halves, so the lowering needs tables
whose two halves are equal (what every Hugging Face export computes: cat(freqs, freqs));
it checks that on constant tables and DMAs only the first half of each table row (a
strided 2-D load). Non-constant tables, interleaved (GPT-J) rotation and partial
rotation inside the op are left to the whole-layer op (partial rotary reaches the
compiler as SLICE → ROPE → CONCAT, each tiled).

x is read through its placement's strides, so the head-split transpose in front of a ROPE
folds into the load (the layout pass marks it "read": x is then (B, H, S, D) seen over the
(B, S, H, D) projection output). A tile is a block of positions (axis -2) of one index of
the outer axes (batch, head): DMA x rows (row stride: the position stride), DMA the cos
and sin half rows of those positions, VE_ROPE_TILE, DMA the rows out. When the heads axis
is contiguous with D in both x and y and the tables do not vary along it (a decode step:
one position), a row holds every head side by side (`head_dim` = D, length = heads·D).
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.layout import rope_tileable
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.ir.model import LayerIR


def _table_offset(t: Placement, idx: dict[int, int], rank: int) -> int:
    """Element offset of table row 0 for the outer index `idx` (x axis → index); the
    table broadcasts over its size-1 axes and over the axes it lacks."""
    lead = rank - len(t.shape)
    return sum(i * t.strides[a - lead] for a, i in idx.items()
               if a >= lead and t.shape[a - lead] > 1)


def lower_rope(lw: Lowering, n: LayerIR) -> bool:
    """ROPE as VE_ROPE_TILE blocks (False: the layer runs whole)."""
    if not rope_tileable(lw.g, n):
        return False
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    cos, sin = lw.raw_const(n.inputs[1]), lw.raw_const(n.inputs[2])
    if y is None or x.strides[-1] != 1 or y.strides[-1] != 1:
        return False
    rank, d = len(x.shape), x.shape[-1]
    # a heads axis contiguous with D on both sides and not in the tables: heads in a row
    ha = rank - 3
    heads = 1
    if ha >= 0 and x.strides[ha] == d and y.strides[ha] == d and all(
            len(t.shape) < 3 or t.shape[ha - (rank - len(t.shape))] == 1 for t in (cos, sin)):
        heads = x.shape[ha]
    outer = [a for a in range(rank - 2) if not (heads > 1 and a == ha)]
    seq = x.shape[-2]
    length = heads * d
    xs, ys, ps = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype], ITEMSIZE[cos.dtype]
    fit = max(1, lw.bank // (length * 4))
    n_outer = int(np.prod([x.shape[a] for a in outer])) if outer else 1
    per = max(1, min(seq, fit, math.ceil(seq * n_outer / lw.n_pes)))
    fields = {"length": length, "head_dim": d, "style": "half",
              "qbits_activation": QBITS_OF[x.dtype], "out_qbits": QBITS_OF[y.dtype],
              "param_qbits": QBITS_OF[cos.dtype]}
    for idx in np.ndindex(*[x.shape[a] for a in outer]):
        at = dict(zip(outer, idx, strict=True))
        xo = sum(i * x.strides[a] for a, i in at.items())
        yo = sum(i * y.strides[a] for a, i in at.items())
        co, so = _table_offset(cos, at, rank), _table_offset(sin, at, rank)
        for s0 in range(0, seq, per):
            r = min(per, seq - s0)
            pe = lw.pe_near(y, yo + s0 * y.strides[-2])
            bi = lw.buf(pe, r * length * xs, f"{n.id}.in")
            lw.dma(False, pe, bi, x, xo + s0 * x.strides[-2], r, length, x.strides[-2], n.id)
            reads = [("in", bi)]
            for role, t, off in (("cos", cos, co), ("sin", sin, so)):
                bt = lw.buf(pe, r * (d // 2) * ps, f"{n.id}.{role}")
                lw.dma(False, pe, bt, t, off + s0 * t.strides[-2], r, d // 2, t.strides[-2],
                       n.id, role="weight")
                reads.append((role, bt))
            bo = lw.buf(pe, r * length * ys, f"{n.id}.out")
            lw.op("VE_ROPE_TILE", pe, n.id, dict(fields, rows=r, **lw.engines.ve(pe)),
                  reads=reads, writes=[("out", bo)], frees=[b for _, b in reads])
            lw.dma(True, pe, bo, y, yo + s0 * y.strides[-2], r, length, y.strides[-2], n.id,
                   frees=[bo])
    return True
