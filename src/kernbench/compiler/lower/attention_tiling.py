"""Does an ATTENTION layer's lowering tile it, told from the graph and the memory plan
(`attention_tiled`; the plan pass asks, `attention_float` uses the same functions).

An attention is tiled when `layout.tiled_attention` accepts it; a float one with a 16-bit
width (activation or KV bits set) also needs placements the float tiles read
(`attention_float_tiles.stored_ok`: Q / K / V fp32 or stored in their format, K / V an
int8 / int16 cache with a static per-tensor scale, an fp32 output) and the keys one tile
holds at once within a TCM bank. Reading a placement may place a constant; nothing else
is allocated or emitted.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.layout import float_formats, tiled_attention
from kernbench.compiler.lower.attention_float_tiles import stored_ok
from kernbench.compiler.lower.context import Lowering
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


def kv_step(n: LayerIR, t_len: int) -> int:
    """Keys the tiles hold at once: the layer's `kv_block` when it blocks the KV sequence
    (`compiler.kv_blocks`), else all of them."""
    blk = int(node_attrs(n).kv_block or 0)
    return blk if 0 < blk < t_len else t_len


def kv_scales(lw: Lowering, n: LayerIR) -> tuple[float, float] | None:
    """(K, V) scales when both are a cache KV_UPDATE stored at int8 / int16 with a static
    per-tensor scale (the one the interpreter's fake quantization uses); else None."""
    if n.qbits_kv not in (8, 16):
        return None
    scales = []
    for tid in n.inputs[1:3]:
        t = lw.g.tensors[tid]
        if t.quant is None or not t.quant.scale or t.quant.zero_point \
                or lw.placement(tid).dtype != f"int{n.qbits_kv}":
            return None
        sc = np.asarray(lw.g.weights[t.quant.scale], np.float32)
        if sc.size != 1:
            return None
        scales.append(float(sc.reshape(())))
    return scales[0], scales[1]


def float_stored_ok(lw: Lowering, n: LayerIR, q: Placement, k: Placement, v: Placement,
                    out: Placement) -> bool:
    """Do the float tiles read the placements: an fp32 output, Q / K / V fp32 or stored in
    their 16-bit format, K / V an int8 / int16-stored cache with its static scale?"""
    q_fmt, kv_fmt = float_formats(n) or (None, None)
    int_cache = kv_scales(lw, n) is not None
    return stored_ok(q, q_fmt) and stored_ok(k, kv_fmt, int_cache) \
        and stored_ok(v, kv_fmt, int_cache) and stored_ok(out, None)


def float_fits(lw: Lowering, n: LayerIR) -> bool:
    """Do the float tiles take the layer's placements (the float plan would not refuse
    them)?"""
    q, k, v = (lw.placement(t) for t in n.inputs[:3])
    out = lw.plan.placements[n.outputs[0]]
    return float_stored_ok(lw, n, q, k, v, out) \
        and kv_step(n, k.shape[2]) * max(q.shape[3], v.shape[3]) * 4 <= lw.bank


def attention_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Does the ATTENTION lowering tile layer `n` (False: it runs whole)? A float layer
    with a 16-bit width runs whole when the float tiles do not take its placements."""
    if not tiled_attention(lw.g, n):
        return False
    if float_formats(n) is None or (n.qbits_activation, n.qbits_kv) == (None, None):
        return True
    return float_fits(lw, n)


def float_groups(lw: Lowering, n: LayerIR) -> list[tuple[int, int]]:
    """The (batch, KV group) pairs of a tiled float ATTENTION, one PE drawn each (its
    query blocks, or its KV-block loop, run there): the float lowering deals them and
    the plan pass counts them."""
    bsz, hkv = lw.placement(n.inputs[0]).shape[0], lw.placement(n.inputs[1]).shape[1]
    return [(b, g) for b in range(bsz) for g in range(hkv)]


__all__ = ["attention_tiled", "float_groups", "float_fits", "float_stored_ok", "kv_scales", "kv_step"]
