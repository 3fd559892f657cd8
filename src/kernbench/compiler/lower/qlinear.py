"""QLINEAR_MATMUL (ONNX QLinearMatMul with a constant B) as tiled TE GEMMs.

The activation is read as it lies in HBM: int8, or uint8 read unsigned by the TE
(``ifm_signed`` false, u8 × s8 → s32). The weight's zero point is removed offline
(b − z_b, per tensor or per column, stored int8 when it fits). The activation's zero point
is the standard column-sum correction: Σ_k (a − z_a)(b − z_b) = A·B_c − z_a·colsum(B_c),
an int32 [N] vector that the first TE_GEMM_TILE of each K loop adds as its bias, so the
accumulator holds exactly the int32 the interpreter computes (`numerics.linalg`). The
epilogue is VE_REQUANTIZE_TILE in place with the per-column multiplier
m = s_a·s_b / s_y (`linalg.qlinear_multiplier`, the same float32 array) and z_y, straight
to the output's int8 / uint8; a 2-D DMA stores the tile. Tiles, K loops and the A reuse
are the GEMM's (`gemm`).

Anything else (a per-row a_scale, B an activation, a weight whose re-centered values do
not fit int8) returns False and runs as a whole-layer op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm import OutTile, _tiles_per_pe, gemm_tiles
from kernbench.compiler.lower.gemm_cubes import gemm_ranges, spread_scratch
from kernbench.compiler.lower.te_weights import values
from kernbench.compiler.lower.values import TeWeight
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR, is_shape_only_array
from kernbench.numerics.linalg import qlinear_multiplier

INT8 = (-128, 127)


@dataclass(frozen=True)
class Requant:
    """The requantize epilogue of a QLinear layer: the fp32 multiplier per output column
    (or channel) and the output's zero point and signedness."""

    mult: Placement
    zero_point: int
    signed: bool

    def fields(self) -> dict:
        """The VE_REQUANTIZE_TILE fields besides the shape and operands."""
        out = {"qbits_activation": 32, "out_qbits": 8, "scale": 1.0,
               "zero_point": self.zero_point}
        if not self.signed:
            out["out_signed"] = False
        return out


def const_value(lw: Lowering, tid: str | None) -> np.ndarray | None:
    """The value of a constant input with values (None: absent, an activation or
    shape-only)."""
    if not tid or not lw.g.tensors[tid].const or tid not in lw.g.weights:
        return None
    v = np.asarray(lw.g.weights[tid])
    return None if is_shape_only_array(v) else v


def scalar(lw: Lowering, tid: str | None) -> np.ndarray | None:
    """A per-tensor constant (one value) as a 0-d array, else None."""
    v = const_value(lw, tid)
    return None if v is None or v.size != 1 else v.reshape(())


def centered(q: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray | None:
    """q − zp as int8 (zp per tensor, or per slice along `axis`), or None when a value
    leaves the int8 range (the weight's zero point then cannot be removed offline)."""
    z = zp.astype(np.int64)
    if z.size > 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        z = z.reshape(shape)
    c = q.astype(np.int64) - z
    if c.size and (c.min() < INT8[0] or c.max() > INT8[1]):
        return None
    return c.astype(np.int8)


def requant(lw: Lowering, n: LayerIR, sa: np.ndarray, sb: np.ndarray, sy: np.ndarray,
            zy: np.ndarray, width: int) -> Requant:
    """The epilogue constants: m = sa·sb/sy (one per output column / channel)."""
    mult = np.broadcast_to(qlinear_multiplier(sa, sb.reshape(-1) if sb.size > 1 else sb, sy),
                           (width,)).astype(np.float32)
    p = lw.const(f"{n.id}:{n.outputs[0]}@qmult", np.ascontiguousarray(mult), "fp32")
    return Requant(p, int(zy), zy.dtype != np.uint8)


def qlinear_operands(lw: Lowering, n: LayerIR) -> tuple | None:
    """(A placement as (M, K), its zero point, the int8 weight, its per-column scale,
    the output placement, the output's scale and zero point), or None."""
    if len(n.inputs) < 8:
        return None
    a, sa_t, za_t, b, sb_t, zb_t, sy_t, zy_t = n.inputs[:8]
    sa, za, sy, zy = (scalar(lw, t) for t in (sa_t, za_t, sy_t, zy_t))
    bq, sb, zb = const_value(lw, b), const_value(lw, sb_t), const_value(lw, zb_t)
    if any(v is None for v in (sa, za, sy, zy, bq, sb, zb)) or lw.g.tensors[a].const:
        return None
    if bq.ndim != 2 or sb.size not in (1, bq.shape[1]) or zb.size not in (1, bq.shape[1]):
        return None
    wc = centered(bq, zb, 1)
    xp = lw.placement(a)
    yp = lw.plan.placements.get(n.outputs[0])
    if wc is None or yp is None or not xp.contiguous or not yp.contiguous \
            or xp.dtype not in ("int8", "uint8") or yp.dtype not in ("int8", "uint8") \
            or xp.shape[-1] != bq.shape[0]:
        return None
    m = int(np.prod(xp.shape[:-1]))
    if int(np.prod(yp.shape)) != m * bq.shape[1]:
        return None
    return xp.view((m, bq.shape[0])), int(za), wc, sa, sb, yp, sy, zy


def lower_qlinear_matmul(lw: Lowering, n: LayerIR) -> bool:
    """Tile a QLINEAR_MATMUL with a constant B; False when it must run whole."""
    ops = qlinear_operands(lw, n)
    if ops is None:
        return False
    xq, za, wc, sa, sb, op, sy, zy = ops
    k, nn = wc.shape
    m = xq.shape[0]
    b = n.inputs[3]
    colsum = wc.astype(np.int64).sum(axis=0)
    # keyed by the zero point too: the stored values are b − z_b
    wp = TeWeight(None, None, 8, colsum, values(f"{b}-{n.inputs[5]}@qlinear_int8", wc, "int8", b))
    corr = None
    if za:  # the activation zero point's column term, the first K step's int32 bias
        corr = lw.const(f"{n.id}:{n.outputs[0]}@zpcorr", (-za * colsum).astype(np.int32),
                        "int32")
    rq = requant(lw, n, sa, sb, sy, zy, nn)
    per_pe = _tiles_per_pe(lw, xq, wp, op, m, nn, k, nn)
    gemm_tiles(lw, n, per_pe, xq, wp, k, nn, corr,
               lambda pe, tile, c: _store(lw, n, pe, c, rq, op, tile, nn),
               spread=spread_scratch(gemm_ranges(lw, xq.dtype, wp, op, m, nn, k, nn)))
    return True


def _store(lw: Lowering, n: LayerIR, pe: int, c: Buf, rq: Requant, op: Placement,
           tile: OutTile, nn: int) -> None:
    """Requantize the accumulator tile in place (per-column multiplier) and store it."""
    m0, n0, tm, tn = tile
    bm = lw.buf(pe, tn * 4, f"{n.id}.qmult")
    lw.dma(False, pe, bm, rq.mult, n0, 1, tn, tn, n.id, role="weight")
    # in place: the 8-bit result overwrites the start of the int32 accumulator it reads
    lw.op("VE_REQUANTIZE_TILE", pe, n.id,
          {"length": tn, "rows": tm, **rq.fields(), **lw.engines.ve(pe)},
          reads=[("in", c), ("multiplier", bm)], writes=[("out", c)], frees=[bm])
    lw.dma(True, pe, c, op, m0 * nn + n0, tm, tn, nn, n.id, frees=[c])
