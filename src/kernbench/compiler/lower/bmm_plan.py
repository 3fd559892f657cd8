"""The geometry of a batched matmul of two activations, told without tiling it: MATMUL
(`bmm_tiles`: integer or fp32 operands, the tile sizes) and QLINEAR_MATMUL of two
activations (`qlinear_bmm_tiles`). The lowerings (`bmm`, `qlinear_bmm`) tile their
outputs with them (`blocks.out_tiles`, one PE drawn a tile) and the plan pass counts
the tiles (`pe_draws`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.qlinear import scalar
from kernbench.ir.model import LayerIR


@dataclass(frozen=True)
class BmmTiles:
    """What every tile of one batched matmul needs."""

    a: Placement
    b: Placement
    out: Placement
    scales: tuple[float, float] | None   # (s_a, s_b) in integer mode, None in fp32 mode
    tm: int
    tn: int
    tk: int


def _static_scale(lw: Lowering, tid: str) -> float | None:
    """The symmetric static int8 scale of an activation, or None."""
    t = lw.g.tensors[tid]
    q = t.quant
    if q is None or q.axis is not None or q.dtype != "int8":
        return None
    if q.zero_point and np.any(np.asarray(lw.g.weights[q.zero_point]) != 0):
        return None
    return float(np.asarray(lw.g.weights[q.scale], np.float32).reshape(()))


def bmm_tiles(lw: Lowering, n: LayerIR) -> BmmTiles | None:
    """Placements, scales and tile sizes; None when the layer cannot be tiled."""
    if len(n.inputs) != 2:
        return None
    a, b = lw.placement(n.inputs[0]), lw.placement(n.inputs[1])
    out = lw.plan.placements.get(n.outputs[0])
    if out is None or any(len(p.shape) < 2 or p.dtype != "fp32" or p.strides[-1] != 1
                          for p in (a, b, out)):  # fmt: skip
        return None
    qa, qw = n.qbits_activation, n.qbits_weight
    if qa == 8 and qw in (8, None):
        sa, sb = _static_scale(lw, n.inputs[0]), _static_scale(lw, n.inputs[1])
        if sa is None or sb is None:
            return None
        scales: tuple[float, float] | None = (sa, sb)
    elif qa is None and qw is None:
        scales = None
    else:
        return None
    m, nn = out.shape[-2:]
    k = a.shape[-1]
    tm, tn = min(m, 128), min(nn, 128)
    while tm * tn * 4 > lw.bank:
        tm, tn = max(1, tm // 2), max(1, tn // 2)
    tk = max(1, min(k, lw.bank // (4 * max(tm, tn))))
    return BmmTiles(a, b, out, scales, tm, tn, tk)


class QlinearBmmTiles(NamedTuple):
    """A QLINEAR_MATMUL of two activations: A, B and the output, their zero points, the
    scalar scales and output zero point (s_a, s_b, s_y, z_y) and the tile sizes."""

    a: Placement
    b: Placement
    out: Placement
    za: int
    zb: int
    scales: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    tm: int
    tn: int
    tk: int


#: fp32 holds every integer below this exactly
EXACT = 2**24


def _spread(dtype: str, z: int) -> int:
    """max |q − z| over the integers of `dtype`."""
    info = np.iinfo(np.dtype(dtype))
    return max(z - int(info.min), int(info.max) - z)


def qlinear_bmm_tiles(lw: Lowering, n: LayerIR) -> QlinearBmmTiles | None:
    """The operands, zero points, scales and tile sizes of a QLINEAR_MATMUL of two
    activations; None when it runs whole (the K bound of the module `qlinear_bmm`)."""
    if len(n.inputs) < 8:
        return None
    a_t, sa_t, za_t, b_t, sb_t, zb_t, sy_t, zy_t = n.inputs[:8]
    if lw.g.tensors[a_t].const or lw.g.tensors[b_t].const:
        return None
    sa, za, sb, zb, sy, zy = (scalar(lw, t) for t in (sa_t, za_t, sb_t, zb_t, sy_t, zy_t))
    if any(v is None for v in (sa, za, sb, zb, sy, zy)):
        return None
    a, b = lw.placement(a_t), lw.placement(b_t)
    out = lw.plan.placements.get(n.outputs[0])
    if out is None or any(len(p.shape) < 2 or p.dtype not in ("int8", "uint8")
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
    return QlinearBmmTiles(a, b, out, int(za), int(zb), (sa, sb, sy, zy), tm, tn, tk)


def out_tile_count(shape: tuple[int, ...], tm: int, tn: int) -> int:
    """How many tm × tn output tiles `blocks.out_tiles` cuts a batched output into."""
    m, nn = shape[-2:]
    return math.prod(shape[:-2]) * math.ceil(m / tm) * math.ceil(nn / tn)
