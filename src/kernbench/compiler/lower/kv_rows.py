"""A projection that stores its new K / V rows straight into the present KV cache.

A decode step's KV_UPDATE copies the past rows into the present cache and appends the
new rows the QKV projection just computed: load them, quantize them to the cache's bits,
store them. The past copy depends on nothing and runs early; the new rows wait for the
projection, and the attention waits for them: a store, a command trip and a load on the
chain of every block, on a PE whose DMA channel is busy with the past copy. When the
projection's output is read by that KV_UPDATE only (through views), the projection's
epilogue quantizes its tile in TCM (VE_QUANTIZE with the cache's calibrated scale, the
same op on the same fp32 values as the KV_UPDATE's: the data pass stays exact) and
stores it into the new rows of the present cache itself; the KV_UPDATE then copies only
the past rows (the lowering plan's `kv_rows`), and the float output is not stored.
The KV_UPDATE's blocks (`past_blocks`, `new_blocks`) are cut here too, so the plan pass
counts the PEs they draw (`kv_update_draws`).

Taken only where the tile's rows map onto few DMAs: a decode step (`MAX_ROWS` new rows a
tile at most); a prefill's new rows are whole blocks the KV_UPDATE copies efficiently.
"""

from __future__ import annotations

import math
from itertools import groupby
from typing import Any

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering
from kernbench.compiler.lower.placement import sole_consumer
from kernbench.compiler.lower.values import KvRows
from kernbench.compiler.tilegraph import Buf, TileOp
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: a tile with more rows than this keeps the KV_UPDATE's own copy of the new rows: the
#: epilogue would need a DMA per row (the cache's rows of one head are a block apart)
MAX_ROWS = 8


def tileable(lw: Lowering, n: LayerIR, past: Placement, new: Placement,
              out: Placement) -> bool:
    """Can KV_UPDATE `n` be tiled (a projection store its new rows, the past copy run in
    blocks): the cache along axis 2, contiguous, at a width the tiles write."""
    t_out = lw.g.tensors[n.outputs[0]]
    if isinstance(n.qbits_kv, int) and t_out.quant is not None and out.dtype == "fp32":
        return False  # fake-quantized at other than 8 bits: the layer runs whole
    if node_attrs(n).axis != 2 or len(out.shape) != 4 or not out.contiguous \
            or not past.contiguous or new.strides[3] != 1:
        return False
    if out.dtype == "int4" and out.shape[3] % 2:
        return False  # rows of a packed 4-bit cache must start on a byte
    # a cache stored at other bits is int16 / int8 / int4 or fp16 from fp32
    return out.dtype == past.dtype or past.dtype == "fp32" and out.dtype in (
        "int16", "int8", "int4", "fp16")


def kv_update_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Does the KV_UPDATE lowering tile layer `n` (False: it runs whole)? It does when a
    projection stores the new rows (the lowering plan's `kv_rows`: only the past is
    copied) or when `tileable` takes the past, new and present placements."""
    if lw.lowering_plan.feeds_kv_update(n.id):
        return True
    past, new = lw.placement(n.inputs[0]), lw.placement(n.inputs[1])
    return tileable(lw, n, past, new, lw.plan.placements[n.outputs[0]])


def _dims(view: Placement) -> tuple[tuple[int, int, int], ...] | None:
    """The view's dimensions by stride, when it is a permutation of a contiguous layout
    (every element of the source is one element of the view), else None."""
    dims = sorted(((i, st, n) for i, (st, n) in enumerate(zip(view.strides, view.shape,
                                                                 strict=True)) if n > 1),
                  key=lambda x: -x[1])
    expect = 1
    for _, st, n in reversed(dims):
        if st != expect:
            return None
        expect *= n
    return tuple(dims)


def kv_rows_out(lw: Lowering, tid: str) -> KvRows | None:
    """The present-cache store the lowering plan gives the projection producing `tid`
    (`planned_kv_rows`), or None."""
    return lw.lowering_plan.kv_rows.get(tid)


def planned_kv_rows(lw: Lowering, tid: str, rows: int) -> KvRows | None:
    """The present-cache store a projection producing `tid` (`rows` rows) can do for the
    KV_UPDATE that appends it, or None (module doc): `tid` float and contiguous, read
    through views by one tiled KV_UPDATE only, as its new rows, the cache stored as fp32
    or quantized from fp32 to int8 / int16 with a static scale, and not updated in place
    (a paged cache's KV_UPDATE would be left with nothing to do). The KV_UPDATE named in
    the result then copies only the past. The plan pass asks."""
    g = lw.g
    src = lw.placement(tid)
    if rows > MAX_ROWS or src.dtype != "fp32" or not src.contiguous or src.parts:
        return None
    found = sole_consumer(g, lw.plan, tid)
    if found is None:
        return None
    c, chain = found
    vid = chain[-1]
    if c.op_type != "KV_UPDATE" or c.inputs[1] != vid or c.inputs[0] == vid \
            or node_attrs(c).in_place:
        return None
    past, new = lw.placement(c.inputs[0]), lw.placement(vid)
    present = lw.plan.placements[c.outputs[0]]
    if not tileable(lw, c, past, new, present) or new.addr != src.addr \
            or present.dtype not in ("fp32", "int8", "int16") or not present.contiguous:
        return None
    scale = lw.plan.scales.get(present.key)
    if present.dtype != "fp32" and scale is None:
        return None
    dims = _dims(new)
    if dims is None:
        return None
    return KvRows(present, past.shape[2], dims,
                  None if present.dtype == "fp32" else float(scale), chain, c.id)


def _runs(kv: KvRows, elem_off: int, rows: int, cols: int, row_stride: int
          ) -> list[tuple[int, int, int]]:
    """(tile element, present element, length) of each run of the tile (rows × cols from
    element `elem_off` of the output, `row_stride` apart) contiguous in both."""
    out = kv.present.strides
    runs = []
    for r in range(rows):
        c = 0
        while c < cols:
            e = elem_off + r * row_stride + c
            idx = [0, 0, 0, 0]
            rest = e
            for dim, st, _ in kv.dims:
                idx[dim], rest = divmod(rest, st)
            length = min(cols - c, kv.present.shape[3] - idx[3])
            b, h, s, j = idx
            runs.append((r * cols + c,
                         b * out[0] + h * out[1] + (kv.first_row + s) * out[2] + j, length))
            c += length
    return runs


def _groups(runs: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Consecutive runs of one length at an even present stride as one 2-D DMA each:
    (tile element, present element, rows, length, present stride)."""
    groups: list[list[int]] = []
    for t0, p0, ln in runs:
        if groups:
            g = groups[-1]
            stride = g[4] if g[2] > 1 else p0 - g[1]
            if ln == g[3] and t0 == g[0] + g[2] * ln and stride >= ln \
                    and p0 == g[1] + g[2] * stride:
                g[2] += 1
                g[4] = stride
                continue
        groups.append([t0, p0, 1, ln, ln])
    return [(g[0], g[1], g[2], g[3], g[4]) for g in groups]


def store_kv_rows(lw: Lowering, kv: KvRows, pe: int, src: Buf, layer: str, elem_off: int,
                  rows: int, cols: int, row_stride: int, engine: dict[str, Any],
                  frees: list[Buf]) -> list[TileOp]:
    """The fp32 tile `src` into its rows of the present cache: quantized with the cache's
    scale first when the cache is int8 / int16 (`frees` released once quantized or
    stored). Returns the ops."""
    ops: list[TileOp] = []
    buf, isz = src, ITEMSIZE[kv.present.dtype]
    if kv.scale is not None:
        bits = QBITS_OF[kv.present.dtype]
        buf = lw.buf(pe, rows * cols * isz, f"{layer}.kvq")
        ops.append(lw.op("VE_QUANTIZE_TILE", pe, layer,
                         {"length": cols, "rows": rows, "qbits_activation": 32,
                          "out_qbits": bits, "scale": kv.scale, "zero_point": 0, **engine},
                         reads=[("in", src)], writes=[("out", buf)], frees=frees))
        frees = [buf]
    groups = _groups(_runs(kv, elem_off, rows, cols, row_stride))
    for i, (t0, p0, n_rows, length, stride) in enumerate(groups):
        ops.append(lw.dma(True, pe, buf, kv.present, p0, n_rows, length, stride, layer,
                          role="kv", frees=frees if i == len(groups) - 1 else (),
                          buf_offset=int(t0 * isz)))
    return ops


#: a KV_UPDATE block has at least this many rows (when the cache has them): smaller
#: blocks pay a DMA latency and a command round trip each for little data
MIN_BLOCK_ROWS = 64

def block_rows(lw: Lowering, rows: int, d: int, isz: float, total_rows: int) -> int:
    """Rows per block: at most a TCM bank, and few enough that the layer's `total_rows`
    (every head's) give each PE a block, but no fewer than MIN_BLOCK_ROWS."""
    spread = max(MIN_BLOCK_ROWS, math.ceil(total_rows / lw.n_pes))
    return max(1, min(rows, int(lw.bank // (d * isz)), spread))


def present_row(out: Placement, h_: int, bh: int, row: int, d: int) -> int:
    """Element offset of row `row` of head `bh` (batch · heads + head) in the present."""
    b, h = divmod(bh, h_)
    return b * out.strides[0] + h * out.strides[1] + row * d


def past_blocks(lw: Lowering, past: Placement, out: Placement, d: int,
                isz: float) -> list[tuple[int, int]]:
    """(first, end) of each block of a KV_UPDATE's past copy, in rows of the (batch · head
    · row) run: runs of consecutive heads whose present rows start in the same cube, each
    cut into even blocks (`block_rows`). Each block draws a PE."""
    b_, h_, p_len, _ = past.shape
    total = b_ * h_ * p_len
    per = block_rows(lw, total, d, isz, total)
    out_blocks = []
    for _, run in groupby(range(b_ * h_),
                          key=lambda bh: lw.cube_near(out, present_row(out, h_, bh, 0, d))):
        bhs = list(run)
        lo, hi = bhs[0] * p_len, (bhs[-1] + 1) * p_len
        size = math.ceil((hi - lo) / math.ceil((hi - lo) / per))  # even blocks
        out_blocks += [(f0, min(hi, f0 + size)) for f0 in range(lo, hi, size)]
    return out_blocks


def head_runs(lw: Lowering, out: Placement, b: int, shape: tuple[int, int], row: int,
              d: int, isz: float) -> list[tuple[int, int]]:
    """(first head, heads) of the runs of batch b's heads (`shape` = (batches, heads))
    whose present row `row` one block writes in a decode step (one new row a head):
    consecutive heads in the same cube, at most a TCM bank of rows (`isz` bytes an
    element), and no more than the layer's rows over the PEs, so that a step with fewer
    rows than PEs still gives each row a block of its own (on a PE of its own)."""
    b_, h_ = shape
    per = max(1, min(int(lw.bank // (d * isz)), -(-b_ * h_ // lw.n_pes)))
    runs: list[tuple[int, int]] = []
    for _, grp in groupby(range(h_), key=lambda h: lw.cube_near(
            out, present_row(out, h_, b * h_ + h, row, d))):
        heads = list(grp)
        end = heads[-1] + 1
        runs += [(h0, min(per, end - h0)) for h0 in range(heads[0], end, per)]
    return runs


def new_blocks(rows: int, per: int) -> list[tuple[int, int]]:
    """(first row, rows) of the blocks of one head's new rows, `per` a block."""
    return [(r0, min(per, rows - r0)) for r0 in range(0, rows, per)]


def kv_update_draws(lw: Lowering, n: LayerIR) -> int | None:
    """The PEs a KV_UPDATE's tiles draw on one cube (None: it runs whole): the past copy's
    blocks (unless the cache is updated in place) and every head's new-row blocks (unless
    the projection stores them, `feeds_kv_update`)."""
    past = lw.placement(n.inputs[0])
    out = lw.plan.placements[n.outputs[0]]
    b_, h_, p_len, d = past.shape
    if not kv_update_tiled(lw, n):
        return None
    new = None if lw.lowering_plan.feeds_kv_update(n.id) else lw.placement(n.inputs[1])
    isz = max(ITEMSIZE[past.dtype], ITEMSIZE[new.dtype] if new is not None else 0)
    drawn = len(past_blocks(lw, past, out, d, isz)) \
        if not node_attrs(n).in_place and p_len else 0
    if new is not None:
        s_len = new.shape[2]
        if s_len == 1:  # a decode step: a sequence's heads a block (`head_runs`)
            return drawn + sum(len(head_runs(lw, out, b, (b_, h_), p_len, d, isz))
                               for b in range(b_))
        per = block_rows(lw, s_len, d, isz, b_ * h_ * s_len)
        drawn += b_ * h_ * len(new_blocks(s_len, per))
    return drawn
