"""TE weights as the tiles read them: prepared once per (weight, mode, bits), stored in
the layout the tiles read.

Integer mode: imported integer weights (QDQ / QOperator, symmetric or re-centered when a
zero point can be removed exactly) or weights the compiler quantizes (symmetric, per
channel unless the qconfig says per tensor), int8 or int4 packed; fp16, bf16 and fp32
modes store a cast copy (an fp32 weight, not quantized, stays fp32 under 16-bit float
activations, as the interpreter multiplies it); a bfp8_b / bfp4_b weight is stored as its
block-float bytes (each panel row whole blocks) and loaded decoded into bf16.
Shape-only models place weights at their bits with no values.

Layout: a GEMM's output tiles are `tn` columns wide, so a weight tile is `tk`
rows of `tn` columns. Stored row-major [K, N], each of those rows is a separate burst run
of the DMA (a 32-column int8 tile reads 32 bytes a row, padded to a 64-byte burst: twice
its bytes on the wire). Stored as column panels, [N / tn][K][tn] (the last panel
narrower), the tile is one contiguous run. The weight is stored when its first tile is
lowered, once per panel width its tiles use.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from kernbench.compiler.hbm import BFP_FORMATS, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.values import TeWeight, WeightValues
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import Graph, LayerIR, is_shape_only_array
from kernbench.numerics import block_float
from kernbench.numerics import quant as qmath
from kernbench.numerics.block_float import BLOCK

#: the numpy storage type of a 16-bit float weight mode
STORAGE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def te_weight(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The weight as the tiles read it, from the lowering plan (`planned_te_weight` made it
    once per (weight, mode, bits)). None: the weight cannot be tiled."""
    return lw.lowering_plan.te_weight((w_tid, mode, n.qbits_weight))


def per_channel_weights(g: Graph) -> bool:
    """Does the compiler quantize float weights per output channel (else per tensor)?"""
    return (g.qconfig or {}).get("weight_granularity", "per_channel") == "per_channel"


def recentered(w: np.ndarray, zp: np.ndarray | None, bits: int) -> tuple[np.ndarray, int] | None:
    """(w - zp as signed integers, their bits) when that is exact: every re-centered value
    fits a signed `bits` (or else 8-bit) range, so the weight's zero point disappears
    offline; None when it does not fit (the row-sum term would be needed)."""
    wc = w.astype(np.int64) - (np.zeros((), np.int64) if zp is None
                               else np.asarray(zp).astype(np.int64).reshape(-1))
    for b in (bits, 8):
        lo, hi = qmath.qrange(b, True)
        if wc.size == 0 or (wc.min() >= lo and wc.max() <= hi):
            return wc.astype(np.int8), b
    return None


def _int_weight(g: Graph, n: LayerIR, w_tid: str,
                w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(int values, scale, bits) of an imported integer weight or of one the compiler
    quantizes (symmetric, per channel unless the qconfig says per tensor). An imported
    weight with zero points (per tensor or per column; int or uint) is re-centered when
    that is exact, else None."""
    t = g.tensors[w_tid]
    if t.quant is not None:
        q = t.quant
        zp = np.asarray(g.weights[q.zero_point]) if q.zero_point else None
        if q.block_size or q.axis is not None and q.axis % 2 != 1:
            return None
        bits = int(q.dtype.lstrip("uint"))
        if bits not in (4, 8) or zp is not None and zp.size not in (1, w.shape[1]):
            return None
        rc = recentered(w, zp, bits)
        if rc is None:
            return None
        return rc[0], np.asarray(g.weights[q.scale], np.float32), rc[1]
    bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
    if bits not in (4, 8, 16):
        return None
    wq, sw = qmath.quantize_weight(w.astype(np.float32, copy=False), bits,
                                   -1 if per_channel_weights(g) else None)
    return wq, np.asarray(sw, np.float32), bits


def planned_te_weight(g: Graph, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The weight `w_tid` of TE layer `n` as tiles in `mode` read it: its values (quantized
    or cast, not yet stored) and scale; None when it cannot be tiled. The plan pass asks
    once per (weight, mode, bits)."""
    w = np.asarray(g.weights[w_tid])
    if w.ndim != 2:
        return None
    if is_shape_only_array(w):
        return _shape_only_weight(g, n, w_tid, w, mode)
    if mode in ("int", "int16"):
        iw = _int_weight(g, n, w_tid, w)
        if iw is None:
            return None
        wq, sw, bits = iw
        dt = {4: "int4", 8: "int8", 16: "int16"}[bits]
        return TeWeight(None, sw, bits, None,
                        values(f"{w_tid}@int{bits}",
                               wq.astype(qmath.storage_dtype(bits), copy=False), dt, w_tid),
                        summed_later=True)
    if mode in ("bf16", "fp32") and n.qbits_weight in BFP_FORMATS:
        # stored as the block float (encoded per panel row, `stored`), loaded into bf16
        if w.shape[1] % BLOCK:
            return None
        return TeWeight(None, None, 16, values=values(f"{w_tid}@{n.qbits_weight}",
                                                      w.astype(np.float32), n.qbits_weight,
                                                      w_tid))
    fmt = _half_format(n, mode)
    if fmt is not None:
        arr = qmath.round_to_float(w.astype(np.float32), fmt).astype(STORAGE[fmt])
        return TeWeight(None, None, 16, values=values(f"{w_tid}@{fmt}", arr, fmt, w_tid))
    if mode in ("fp16", "bf16", "fp32") and isinstance(n.qbits_weight, int):
        return _dequantized_weight(g, n, w_tid, w)
    return TeWeight(None, None, 32,
                    values=values(f"{w_tid}@fp32", w.astype(np.float32), "fp32", w_tid))


def _dequantized_weight(g: Graph, n: LayerIR, w_tid: str, w: np.ndarray) -> TeWeight | None:
    """An integer-width weight under float activations (weight-only quantization):
    quantized symmetric at its bits (per channel unless the qconfig says per tensor) and
    dequantized to fp32, the values the interpreter multiplies; stored as fp32. None for an
    imported integer weight (the interpreter does not dequantize it in this mode)."""
    if g.tensors[w_tid].quant is not None:
        return None
    bits = int(n.qbits_weight)
    axis = -1 if per_channel_weights(g) else None
    wq, sw = qmath.quantize_weight(w.astype(np.float32), bits, axis)
    wd = qmath.dequantize(wq, sw, 0, None if axis is None else 1)
    return TeWeight(None, None, 32, values=values(f"{w_tid}@w{bits}fp32", wd, "fp32", w_tid))


def values(key: str, data: np.ndarray, dtype: str, source: str | None) -> WeightValues:
    """The values of a [K, N] weight, stored when a tile first reads them."""
    return WeightValues(key, data, dtype, (int(data.shape[0]), int(data.shape[1])), source)


def _shape_only_weight(g: Graph, n: LayerIR, w_tid: str, w: np.ndarray,
                       mode: str) -> TeWeight | None:
    """A shape-only model's weight: placed at its stored bits, no values (unit scales)."""
    shape = (int(w.shape[0]), int(w.shape[1]))
    if mode in ("int", "int16"):
        bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
        if bits not in ((4, 8, 16) if mode == "int16" else (4, 8)) \
                or g.tensors[w_tid].quant is not None:
            return None
        dt = {4: "int4", 8: "int8", 16: "int16"}[bits]
        return TeWeight(None, np.ones((w.shape[1],), np.float32), bits,
                        values=WeightValues(f"{w_tid}@int{bits}", None, dt, shape, w_tid))
    fmt = _half_format(n, mode)
    dt, bits = (fmt, 16) if fmt is not None \
        else (n.qbits_weight, 16) if n.qbits_weight in BFP_FORMATS else ("fp32", 32)
    return TeWeight(None, None, bits, values=WeightValues(f"{w_tid}@{dt}", None, dt, shape, w_tid))


def _half_format(n: LayerIR, mode: str) -> str | None:
    """The 16-bit float format the weight is stored rounded to: the QConfig's fp16 / bf16
    weight width in the mode of that format, or in "dq" (integer activations); None:
    another storage."""
    qw = n.qbits_weight
    if qw in ("fp16", "bf16") and mode in (qw, "dq"):
        return str(qw)
    return None


def panel_width(wp: TeWeight, tn: int) -> int:
    """Columns per panel when tiles `tn` columns wide read `wp` (0: row-major [K, N]).
    One panel is the row-major layout. An int4 panel row must be whole bytes."""
    if wp.values is None:
        return 0
    nn = wp.shape[1]
    if tn >= nn or wp.dtype == "int4" and (tn % 2 or nn % 2) \
            or wp.dtype in BFP_FORMATS and tn % BLOCK:
        return 0
    return tn


def panels(w: np.ndarray, panel: int) -> np.ndarray:
    """[K, N] as column panels `panel` wide, flat: panel j holds columns
    [j·panel, (j+1)·panel) row by row, so tile (k0, n0) of a panel `width` wide starts at
    element n0·K + k0·width."""
    k, n = w.shape
    whole = n - n % panel  # the panels `panel` wide, then a narrower last one
    out = w[:, :whole].reshape(k, whole // panel, panel).transpose(1, 0, 2).reshape(-1)
    return np.concatenate([out, w[:, whole:].reshape(-1)]) if whole < n else out


def stored_key(v: WeightValues, panel: int) -> str:
    """The storage key of `v` as column panels `panel` wide (0: row-major)."""
    return v.key + (f"@panel{panel}" if panel else "")


def stored(lw: Lowering, v: WeightValues, panel: int,
            home: Sequence[tuple[int, int]] = ()) -> Placement:
    """`v` in HBM, row-major (`panel` 0) or as column panels `panel` wide: stored on first
    use, once per (weight, panel width); `home`: the cubes of its parts when it is placed
    once (`MemoryPlan.constant`, `weight_home`)."""
    key = stored_key(v, panel)
    shape = (v.shape[0] * v.shape[1],) if panel else v.shape
    stored = lw.plan.allocations.get(key)  # the memory plan: stored by an earlier tile
    if stored is not None:
        return stored.placement(shape)
    data = v.data
    if panel and data is not None:
        data = panels(data, panel)
    if data is not None and v.dtype == "int4":
        data = qmath.pack_int4(data)
    elif data is not None and v.dtype in BFP_FORMATS:
        # every panel row is whole blocks (its width a multiple of BLOCK), so the flat
        # blocks are the blocks of the [K, N] rows the interpreter rounds
        data = block_float.encode(data, v.dtype)
    return lw.const(key, data, v.dtype, source=v.source, shape=shape, home=home)


#: a decode GEMM's weight tile (`CHUNKED_MAX_ROWS`) moves in DMAs of at least this many bytes: a PE's
#: read channel serves one transfer at a time, first come first served, and a decode
#: step's critical loads (a few hundred bytes of activation) queued behind a whole
#: 16-24 KiB weight tile being prefetched. The chunk is the fastest on the gpt2-small
#: decode step; prefill tiles keep whole DMAs (chunks gain nothing there)
WEIGHT_CHUNK_BYTES = 8192
#: ... and in at most this many DMAs a tile: each chunk pays a transfer's fixed cost and
#: waits for the previous chunk's completion trip, so a large tile (a Llama-size decode
#: step's hundreds of KiB) cut into 8 KiB chunks streams its weight at a fraction of the
#: DMA's rate, and the weight stream is what bounds a decode GEMM
MAX_WEIGHT_CHUNKS = 4
#: the tiles of a GEMM of at most this many rows (a decode step's sequences) move their
#: weight in chunks: their A is small beside their weight, so their critical loads are too
CHUNKED_MAX_ROWS = 32


def chunk_rows(tk: int, row_bytes: int) -> int:
    """Rows of a `tk`-row weight tile of `row_bytes` a row per chunk DMA: at least
    `WEIGHT_CHUNK_BYTES` (at least one row), and no more than `MAX_WEIGHT_CHUNKS` chunks."""
    per = max(1, WEIGHT_CHUNK_BYTES // row_bytes)
    return max(per, -(-tk // MAX_WEIGHT_CHUNKS))


def weight_tile(lw: Lowering, pe: int, bw: Buf, wp: TeWeight, layer: str, rows: tuple[int, int],
                cols: tuple[int, int], panel: int, chunked: bool = False) -> None:
    """DMA rows [k0, k0 + tk) × columns [n0, n0 + tn) of the weight into `bw` (tk × tn,
    row-major): from its panel when `panel` (`panel_width`) is not 0, one contiguous run
    (`chunked`: in runs of `chunk_rows` rows, each a DMA into its rows of `bw`), else
    from the row-major weight, one run a row."""
    (k0, tk), (n0, tn) = rows, cols
    k, nn = wp.shape
    if wp.dtype in BFP_FORMATS and (n0 % BLOCK or tn % BLOCK):
        raise ValueError(f"{layer}: a {wp.dtype} weight tile at column {n0}, {tn} wide, is "
                         f"not whole blocks of {BLOCK}")
    if not panel:
        p = wp.placement if wp.values is None else stored(lw, wp.values, 0)
        lw.dma(False, pe, bw, p, k0 * nn + n0, tk, tn, nn, layer, role="weight")
        return
    width = min(panel, nn - n0)
    if n0 % panel or tn != width:
        raise ValueError(f"{layer}: weight tile at column {n0}, {tn} wide, is not a "
                         f"{panel}-column panel")
    p = stored(lw, wp.values, panel)
    row_bytes = width * wp.bits // 8
    per = chunk_rows(tk, row_bytes) if chunked and row_bytes else tk
    for r0 in range(0, tk, per):
        nr = min(per, tk - r0)
        lw.dma(False, pe, bw, p, n0 * k + (k0 + r0) * width, nr, width, width, layer,
               role="weight", buf_offset=r0 * row_bytes)


