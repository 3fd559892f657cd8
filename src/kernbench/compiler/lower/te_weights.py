"""TE weights as the tiles read them: stored once per (weight, mode, bits).

Integer mode: imported integer weights (QDQ / QOperator, symmetric or re-centered when a
zero point can be removed exactly) or weights the compiler quantizes (symmetric, per
channel unless the qconfig says per tensor), int8 or int4 packed; fp16 and fp32 modes
store a cast copy. Shape-only models place weights at their bits with no values.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.lower.context import Lowering, TeWeight
from kernbench.ir.model import LayerIR, is_shape_only_array
from kernbench.numerics import quant as qmath


def te_weight(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The weight as stored for the tiles, computed once per (weight, mode, bits): checking
    a layer and lowering it both ask. None: the weight cannot be tiled."""
    key = (w_tid, mode, n.qbits_weight)
    if key not in lw.weights:
        lw.weights[key] = _te_weight_once(lw, n, w_tid, mode)
    return lw.weights[key]


def recentered(w: np.ndarray, zp: np.ndarray | None, bits: int) -> tuple[np.ndarray, int] | None:
    """(w - zp as signed integers, their bits) when that is exact: every re-centered value
    fits a signed `bits` (or else 8-bit) range, so the weight's zero point disappears
    offline (ADR-0704); None when it does not fit (the row-sum term would be needed)."""
    wc = w.astype(np.int64) - (np.zeros((), np.int64) if zp is None
                               else np.asarray(zp).astype(np.int64).reshape(-1))
    for b in (bits, 8):
        lo, hi = qmath.qrange(b, True)
        if wc.size == 0 or (wc.min() >= lo and wc.max() <= hi):
            return wc.astype(np.int8), b
    return None


def _int_weight(lw: Lowering, n: LayerIR, w_tid: str,
                w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(int values, scale, bits) of an imported integer weight or of one the compiler
    quantizes (symmetric, per channel unless the qconfig says per tensor). An imported
    weight with zero points (per tensor or per column; int or uint) is re-centered when
    that is exact, else None."""
    t = lw.g.tensors[w_tid]
    if t.quant is not None:
        q = t.quant
        zp = np.asarray(lw.g.weights[q.zero_point]) if q.zero_point else None
        if q.block_size or q.axis is not None and q.axis % 2 != 1:
            return None
        bits = int(q.dtype.lstrip("uint"))
        if bits not in (4, 8) or zp is not None and zp.size not in (1, w.shape[1]):
            return None
        rc = recentered(w, zp, bits)
        if rc is None:
            return None
        return rc[0], np.asarray(lw.g.weights[q.scale], np.float32), rc[1]
    bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
    if bits not in (4, 8):
        return None
    wq, sw = qmath.quantize_weight(w.astype(np.float32), bits,
                                   -1 if lw.per_channel else None)
    return wq, np.asarray(sw, np.float32), bits


def _te_weight_once(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    w = np.asarray(lw.g.weights[w_tid])
    if w.ndim != 2:
        return None
    if is_shape_only_array(w):
        return _shape_only_weight(lw, n, w_tid, w, mode)
    if mode == "int":
        iw = _int_weight(lw, n, w_tid, w)
        if iw is None:
            return None
        wq, sw, bits = iw
        dt = "int4" if bits == 4 else "int8"
        data = qmath.pack_int4(wq) if bits == 4 else wq.astype(np.int8)
        p = lw.const(f"{w_tid}@int{bits}", np.asarray(data), dt, source=w_tid,
                     shape=tuple(w.shape))
        return TeWeight(p, sw, bits, wq.astype(np.int64).sum(axis=0))
    if mode == "fp16":
        arr = qmath.round_to_float(w.astype(np.float32), "fp16").astype(np.float16)
        return TeWeight(lw.const(f"{w_tid}@fp16", arr, "fp16", source=w_tid), None, 16)
    return TeWeight(lw.const(f"{w_tid}@fp32", w.astype(np.float32), "fp32", source=w_tid),
                    None, 32)


def _shape_only_weight(lw: Lowering, n: LayerIR, w_tid: str, w: np.ndarray,
                       mode: str) -> TeWeight | None:
    """A shape-only model's weight: placed at its stored bits, no values (unit scales)."""
    if mode == "int":
        bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
        if bits not in (4, 8) or lw.g.tensors[w_tid].quant is not None:
            return None
        dt = "int4" if bits == 4 else "int8"
        p = lw.const(f"{w_tid}@int{bits}", None, dt, source=w_tid, shape=tuple(w.shape))
        return TeWeight(p, np.ones((w.shape[1],), np.float32), bits)
    dt, bits = ("fp16", 16) if mode == "fp16" else ("fp32", 32)
    return TeWeight(lw.const(f"{w_tid}@{dt}", None, dt, source=w_tid, shape=tuple(w.shape)),
                    None, bits)


