"""How the QOperator layers are tiled, told from the graph and the memory plan (the plan
pass asks whether a layer runs whole; `qlinear`, `qlinear_bmm`, `qlinear_conv` and
`quant_rows` emit the tiles from the same answers).

- QLINEAR_MATMUL (`qlinear_matmul_tiled`): with a constant B, `qlinear.qlinear_operands`;
  of two activations (`qlinear_bmm_tiling`), per-tensor constant scales and zero points,
  8-bit operands and output with unit inner strides, and K small enough that the
  centered fp16 products add up exactly in fp32 (`EXACT`);
- QLINEAR_CONV (`qconv_tiling`): per-tensor activation / output parameters, a 1-D / 2-D
  weight whose zero point re-centers it into int8, contiguous 8-bit activation and output,
  a window geometry `window.geom` takes, whole groups, and a zero-point term plus bias
  that fits int32;
- QUANTIZE / DEQUANTIZE (`quant_tiling`): per-tensor constant parameters (a positive
  scale), a non-constant input, contiguous fp32 ↔ 8-bit placements of one shape.
Reading a placement may place a constant; nothing else is allocated or emitted.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.qlinear import centered, const_value, qlinear_operands, scalar
from kernbench.compiler.lower.window import Geom, geom
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

#: fp32 holds every integer below this exactly
EXACT = 2**24
INT32 = (-(2**31), 2**31 - 1)
INT8 = ("int8", "uint8")


class QBmmTiling(NamedTuple):
    """A QLINEAR_MATMUL of two activations: placements, zero points, the scalars of its
    requantize epilogue (s_a, s_b, s_y, z_y) and the tile sizes."""

    a: Placement
    b: Placement
    out: Placement
    za: int
    zb: int
    scalars: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    tm: int
    tn: int
    tk: int


class QConvTiling(NamedTuple):
    """A tiled QLINEAR_CONV: the re-centered int8 weight, the int32 zero-point term plus
    bias per output channel, the geometry and placements, and the scalars of its
    requantize epilogue."""

    wc: np.ndarray
    term: np.ndarray
    geo: Geom
    groups: int
    x: Placement
    y: Placement
    sx: np.ndarray
    zx: int
    sw: np.ndarray
    sy: np.ndarray
    zy: np.ndarray


def _spread(dtype: str, z: int) -> int:
    """max |q − z| over the integers of `dtype`."""
    info = np.iinfo(np.dtype(dtype))
    return max(z - int(info.min), int(info.max) - z)


def qlinear_bmm_tiling(lw: Lowering, n: LayerIR) -> QBmmTiling | None:
    """QLINEAR_MATMUL `n` of two activations as batched tiles, or None (module doc)."""
    if len(n.inputs) < 8:
        return None
    a_t, sa_t, za_t, b_t, sb_t, zb_t, sy_t, zy_t = n.inputs[:8]
    if lw.g.tensors[a_t].const or lw.g.tensors[b_t].const:
        return None
    sa, za, sb, zb, sy, zy = (scalar(lw, t) for t in (sa_t, za_t, sb_t, zb_t, sy_t, zy_t))
    if sa is None or za is None or sb is None or zb is None or sy is None or zy is None:
        return None
    a, b = lw.placement(a_t), lw.placement(b_t)
    out = lw.plan.placements.get(n.outputs[0])
    if out is None or any(len(p.shape) < 2 or p.dtype not in INT8
                          or p.strides[-1] != 1 for p in (a, b, out)):
        return None
    k = a.shape[-1]
    if k * _spread(a.dtype, int(za)) * _spread(b.dtype, int(zb)) >= EXACT:
        return None
    m, nn = out.shape[-2:]
    tm, tn = min(m, 128), min(nn, 128)
    while tm * tn * 4 > lw.bank:
        tm, tn = max(1, tm // 2), max(1, tn // 2)
    tk = max(1, min(k, lw.bank // (2 * max(tm, tn))))
    return QBmmTiling(a, b, out, int(za), int(zb), (sa, sb, sy, zy), tm, tn, tk)


def qlinear_matmul_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Does the QLINEAR_MATMUL lowering tile layer `n`: as GEMM tiles with a constant B,
    else as batched tiles of two activations (False: it runs whole)?"""
    return qlinear_operands(lw, n) is not None or qlinear_bmm_tiling(lw, n) is not None


def qconv_tiling(lw: Lowering, n: LayerIR) -> QConvTiling | None:
    """QLINEAR_CONV `n`'s tiling inputs, or None when it runs whole (module doc)."""
    g = lw.g
    if len(n.inputs) < 8:
        return None
    x, sx_t, zx_t, w, sw_t, zw_t, sy_t, zy_t = n.inputs[:8]
    sx, zx, sy, zy = (scalar(lw, t) for t in (sx_t, zx_t, sy_t, zy_t))
    wq, sw, zw = const_value(lw, w), const_value(lw, sw_t), const_value(lw, zw_t)
    b_t = n.inputs[8] if len(n.inputs) > 8 and n.inputs[8] else None
    bias = const_value(lw, b_t) if b_t else None
    if sx is None or zx is None or sy is None or zy is None or wq is None or sw is None \
            or zw is None or g.tensors[x].const or (b_t and bias is None) \
            or wq.ndim not in (3, 4):
        return None
    cout = wq.shape[0]
    if sw.size not in (1, cout) or zw.size not in (1, cout):
        return None
    wc = centered(wq, zw, 0)
    xp, yp = lw.placement(x), lw.plan.placements.get(n.outputs[0])
    if wc is None or yp is None or not xp.contiguous or not yp.contiguous \
            or xp.dtype not in INT8 or yp.dtype not in INT8:
        return None
    geo = geom(n, list(xp.shape), list(yp.shape), list(wq.shape[2:]))
    groups = int(node_attrs(n).group)
    if geo is None or geo.c % groups or cout % groups or wq.shape[1] * groups != geo.c:
        return None
    term = -int(zx) * wc.reshape(cout, -1).astype(np.int64).sum(axis=1)
    if bias is not None:
        term = term + bias.astype(np.int64).reshape(-1)
    if term.min() < INT32[0] or term.max() > INT32[1]:
        return None
    return QConvTiling(wc, term, geo, groups, xp, yp, sx, int(zx), sw, sy, zy)


def quant_tiling(lw: Lowering, n: LayerIR) -> tuple[float, int, Placement, Placement] | None:
    """(scale, zero point, input, output) of a QUANTIZE (fp32 → 8-bit) or DEQUANTIZE (8-bit
    → fp32) the tiles compute, or None when it runs whole (module doc)."""
    a = node_attrs(n)
    if len(n.inputs) < 2 or a.axis is not None or a.block_size:
        return None
    s = scalar(lw, n.inputs[1])
    z = scalar(lw, n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else 0
    if s is None or z is None or float(s) <= 0 or lw.g.tensors[n.inputs[0]].const:
        return None
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    want = (("fp32",), INT8) if n.op_type == "QUANTIZE" else (INT8, ("fp32",))
    if y is None or x.dtype not in want[0] or y.dtype not in want[1] \
            or not x.contiguous or not y.contiguous or x.shape != y.shape:
        return None
    return float(s), int(z), x, y


#: fewest elements of a QUANTIZE / DEQUANTIZE block when the tensor is cut one per PE
#: (tiny blocks cost more in commands than they save)
QMIN_ELEMS = 1024


def quant_blocks(lw: Lowering, x: Placement) -> list[tuple[int, int]]:
    """(first element, elements) of the flat blocks of a QUANTIZE / DEQUANTIZE of `x`:
    element-wise with scalar parameters, one per PE down to `QMIN_ELEMS`, at most one fp32
    bank. The lowering (`quant_rows`) cuts them and the plan pass counts them (each draws
    a PE)."""
    total = int(np.prod(x.shape)) if x.shape else 1
    per = max(1, min(total, lw.bank // 4, max(QMIN_ELEMS, math.ceil(total / lw.n_pes))))
    return [(e0, min(per, total - e0)) for e0 in range(0, total, per)]


__all__ = ["EXACT", "INT32", "QBmmTiling", "QConvTiling", "QMIN_ELEMS", "qconv_tiling",
           "qlinear_bmm_tiling", "qlinear_matmul_tiled", "quant_blocks", "quant_tiling"]
