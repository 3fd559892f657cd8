"""How a MATMUL of two activations is tiled, told from the graph and the memory plan
(`bmm_tiling`; the plan pass asks whether it runs whole, `bmm` emits the tiles).

Tiled: two operands and an output of rank 2 or more, fp32 in HBM with unit inner strides,
either in fp32 mode (no bits) or int8 with static symmetric per-tensor scales on both
operands; output tiles of at most 128 × 128 within a TCM bank, a K step within a bank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
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


def bmm_tiling(lw: Lowering, n: LayerIR) -> BmmTiles | None:
    """Placements, scales and tile sizes; None when the layer cannot be tiled (it runs
    whole). Reading a placement may place a constant; nothing else is allocated."""
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


__all__ = ["BmmTiles", "bmm_tiling"]
