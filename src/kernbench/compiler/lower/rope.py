"""ROPE (rotate-half rotary embedding) as VE_ROPE_TILE row blocks over the PEs.

The IR's ROPE is y = x·cos + rotate_half(x)·sin over the last axis (head_dim D) with
full-width cos / sin tables broadcast to x (numerics.rope). VE_ROPE_TILE takes one table
row of D/2 angles per row and repeats it for both halves, so the lowering needs tables
whose two halves are equal (what every Hugging Face export computes: cat(freqs, freqs));
it checks that on constant tables, proves it from the producers of tables computed at
run time (`rope_tables`: Llama's cos / sin of Concat(freqs, freqs) from the position ids)
and DMAs only the first half of each table row (a strided 2-D load; a constant table as
a weight, a computed one as an activation). Tables not proven so, interleaved (GPT-J)
rotation and partial rotation inside the op are left to the whole-layer op (partial rotary reaches the
compiler as SLICE → ROPE → CONCAT, each tiled).

x is read through its placement's strides, so the head-split transpose in front of a ROPE
folds into the load (the layout pass marks it "read": x is then (B, H, S, D) seen over the
(B, S, H, D) projection output). A tile is a block of positions (axis -2) of one index of
the outer axes (batch, head): DMA x rows (row stride: the position stride), DMA the cos
and sin half rows of those positions, VE_ROPE_TILE, DMA the rows out. When the heads axis
is contiguous with D in both x and y and the tables do not vary along it, a row holds
every head of one position side by side (`head_dim` = D, length = heads·D): so it is
after a folded head transpose, whose ROPE output the layout pass stores in the same
(B, S, H, D) order (`CompileState.stored_permuted`; attention, KV_UPDATE and the copies
read it through strides), and in a decode step (one position). Blocks hold at least
`MIN_TILE_BYTES` of x, one block per PE when there is more.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.rope_tiling import RopeTiling, rope_blocks, rope_tiling
from kernbench.ir.model import LayerIR


def lower_rope(lw: Lowering, n: LayerIR) -> bool:
    """ROPE as VE_ROPE_TILE blocks (False: the layer runs whole)."""
    geo = rope_tiling(lw, n)
    if geo is None:
        return False
    for xo, yo, offs, s0, rows, cube in rope_blocks(lw, geo):
        _block(lw, n, geo, lw.pes.next(cube), xo, yo, offs, s0, rows)
    return True


def _block(lw: Lowering, n: LayerIR, geo: RopeTiling, pe: int, xo: int, yo: int,
           offs: tuple[int, int], s0: int, r: int) -> None:
    """One tile: positions s0 .. s0 + r of one outer index: DMA x rows, the cos / sin
    half rows, VE_ROPE_TILE, DMA the rows out."""
    x, y, length = geo.x, geo.y, geo.length
    half = x.shape[-1] // 2
    bi = lw.buf(pe, r * length * ITEMSIZE[x.dtype], f"{n.id}.in")
    lw.dma(False, pe, bi, x, xo + s0 * x.strides[-2], r, length, x.strides[-2], n.id)
    reads = [("in", bi)]
    for role, t, off, kind in (("cos", geo.cos, offs[0], geo.roles[0]),
                               ("sin", geo.sin, offs[1], geo.roles[1])):
        bt = lw.buf(pe, r * half * ITEMSIZE[t.dtype], f"{n.id}.{role}")
        lw.dma(False, pe, bt, t, off + s0 * t.strides[-2], r, half, t.strides[-2], n.id,
               role=kind)
        reads.append((role, bt))
    bo = lw.buf(pe, r * length * ITEMSIZE[y.dtype], f"{n.id}.out")
    lw.op("VE_ROPE_TILE", pe, n.id, dict(geo.fields, rows=r, **lw.engines.ve(pe)),
          reads=reads, writes=[("out", bo)], frees=[b for _, b in reads])
    lw.dma(True, pe, bo, y, yo + s0 * y.strides[-2], r, length, y.strides[-2], n.id,
           frees=[bo])
