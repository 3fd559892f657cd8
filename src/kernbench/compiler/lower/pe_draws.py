"""How many PEs each layer's tiles draw from the round-robin, told without tiling: what
the plan pass needs to plan where each layer starts on one cube (`planned_first_pe`).

On one cube the round-robin counter (`placement.PeCursor.position`) carries from one
layer to the next, so a layer's first PE is the number of PEs the layers before it drew,
modulo the PEs. `layer_draws` counts a layer's draws with the very functions its lowering
cuts its blocks with (each block, output tile part or phase PE is one draw), in the
tiling pass's dispatch order (a lowering that gives a layer up draws nothing first:
each refuses with its "does it tile" function before it draws), and the whole-layer
fallback's one PE. A layer the tiling pass skips (`lone_plan.takes_no_op`) draws none.
What a lowering remembers across layers and changes the count (`prepare_x` converts an
activation for the first layer asking only) is replayed in graph order (`Draws`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.layout import COPY_OPS, float_formats
from kernbench.compiler.lower.activation import prepared_form, te_mode
from kernbench.compiler.lower.attention import attention_draws
from kernbench.compiler.lower.attention_tiling import attention_tiled, float_groups
from kernbench.compiler.lower.blocks import out_tile_count, rows_cols
from kernbench.compiler.lower.bmm_tiling import bmm_tiling
from kernbench.compiler.lower.context import FLOAT_DTYPES, Lowering
from kernbench.compiler.lower.conv_plan import (
    conv_blocking,
    conv_shape,
    conv_tiled,
    dequantized_int8,
    float_activation,
)
from kernbench.compiler.lower.conv_tiles import ConvBlocking, conv_units
from kernbench.compiler.lower.copy_tiling import copy_draws
from kernbench.compiler.lower.dynq_plan import dynamic_draws
from kernbench.compiler.lower.ew_tiling import clamp_tiling, cumsum_tiling, ew_tiling
from kernbench.compiler.lower.gather_tiling import gather_tiling
from kernbench.compiler.lower.gemm_cubes import gemm_ranges
from kernbench.compiler.lower.gemm_outputs import gemm_tiled
from kernbench.compiler.lower.gemm_parts import range_parts, range_tiles
from kernbench.compiler.lower.kv_rows import kv_update_draws
from kernbench.compiler.lower.lone_plan import takes_no_op
from kernbench.compiler.lower.pool_tiling import (
    pool_tiling,
    pool_units,
    reduce_blocks,
    reduce_tiling,
)
from kernbench.compiler.lower.qdq_layout import layout_blocks, plain_rows, qdq_layout, qdq_tiled
from kernbench.compiler.lower.qlinear import qlinear_operands
from kernbench.compiler.lower.qlinear_tiling import (
    qconv_tiling,
    qlinear_bmm_tiling,
    quant_blocks,
    quant_tiling,
)
from kernbench.compiler.lower.rope_tiling import rope_blocks, rope_tiling
from kernbench.compiler.lower.row_spec import ROW_OPS, row_op_spans, row_spec
from kernbench.compiler.lower.te_weights import te_weight, values
from kernbench.compiler.lower.values import TeWeight
from kernbench.ir.model import LayerIR

#: the PEs a layer run whole draws (`layer_op`)
WHOLE = 1


@dataclass
class Draws:
    """The state the count replays across layers in graph order: the activations a
    GEMM-shaped layer converted (`activation.Prepared`'s keys)."""

    converted: set[tuple[str, str, int]] = field(default_factory=set)


def _row_op(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    spec = row_spec(lw, n)
    return None if spec is None else len(row_op_spans(lw, n, spec))


def _elementwise(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = ew_tiling(lw, n)
    return None if t is None else len(t.blocks)


def _clamp(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = clamp_tiling(lw, n)
    return None if t is None else len(t.starts())


def _cumsum(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = cumsum_tiling(lw, n)
    return None if t is None else len(t.spans)


def _gather(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = gather_tiling(lw, n)
    return None if t is None else len(t.spans)


def gemm_parts_drawn(lw: Lowering, a_dtype: str, wp: TeWeight, op: Placement, m: int,
                     nn_layer: int, reduced: bool = False) -> int:
    """The K parts of the output tiles a GEMM of activation `a_dtype` (M = `m`) and
    weight `wp` into output `op` deals to PEs (`gemm_cubes.gemm_ranges`,
    `gemm_parts.range_tiles`, `gemm_parts.range_parts`, as `gemm._tiles_per_pe`)."""
    k, nn = wp.shape
    return sum(len(range_parts(range_tiles(lw, a_dtype, wp.dtype, wp.bits, hi - lo, nn, k,
                                           cube, reduced), lo, hi, nn, k))
               for lo, hi, cube in gemm_ranges(lw, a_dtype, wp, op, m, nn, k, nn_layer))


def _stored(lw: Lowering, out_tid: str, m: int, nn: int) -> Placement | None:
    """The output `gemm.gemm` stores (a contiguous float of M × N elements), else None."""
    op = lw.plan.placements[out_tid]
    ok = op.contiguous and op.dtype in FLOAT_DTYPES and int(np.prod(op.shape)) == m * nn
    return op if ok else None


def _reduced(lw: Lowering, layer: str) -> bool:
    after = lw.lowering_plan.norms.get(layer)
    return after is not None and after.reduced


def _gemm(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    """GEMM / QKV_PROJ (`gemm_layer`): a layer `gemm_outputs.gemm_tiled` refuses runs
    whole before it prepares anything; else the activation's conversion (the first layer
    asking `prepare_x`), then each weight's output tile parts."""
    if not gemm_tiled(lw, n):
        return None
    weights = [n.inputs[1]] if n.op_type == "GEMM" else list(n.inputs[1:4])
    mode = te_mode(n)
    assert mode is not None
    wps = [te_weight(lw, n, w, mode) for w in weights]
    bits = n.qbits_activation if mode in ("int", "int16", "dq") else 16
    form = prepared_form(lw, n.inputs[0], mode, bits)
    _, drawn = _convert_once(lw, n.inputs[0], mode, bits, d)
    assert form.dtype is not None
    nn_layer = sum(int(wp.shape[1]) for wp in wps if wp is not None)
    for out, wp in zip(n.outputs, wps, strict=False):
        assert wp is not None
        op = _stored(lw, out, form.rows, int(wp.shape[1]))
        if op is None:  # a QKV_PROJ whose outputs the tiles cannot store is refused
            return drawn
        drawn += gemm_parts_drawn(lw, form.dtype, wp, op, form.rows, nn_layer,
                                  _reduced(lw, n.id))
    return drawn


def _matmul_integer(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    """A MATMUL_INTEGER on a tiled DYNAMIC_QUANTIZE: the integer GEMM's tile parts on its
    int8 data (`dynq.lower_matmul_integer`; an output it cannot store is refused)."""
    im = lw.lowering_plan.integer_matmuls.get(n.id)
    if im is None:
        return None
    dq = lw.g.node(lw.g.tensors[n.inputs[0]].producer)
    m = rows_cols(lw.placement(dq.inputs[0]))[0]
    wp = TeWeight(None, None, 8, None, values(n.inputs[1], im.weight, "int8", n.inputs[1]))
    op = _stored(lw, im.out_tid, m, int(im.weight.shape[1]))
    return 0 if op is None else gemm_parts_drawn(lw, "int8", wp, op, m,
                                                 int(im.weight.shape[1]), _reduced(lw, n.id))


def _qlinear_matmul(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    """QLINEAR_MATMUL with a constant B (`qlinear`): GEMM tile parts."""
    ops = qlinear_operands(lw, n)
    if ops is None:
        return None
    xq, wc, op = ops[0], ops[2], ops[5]
    wp = TeWeight(None, None, 8, None, values(n.inputs[3], wc, "int8", n.inputs[3]))
    return gemm_parts_drawn(lw, xq.dtype, wp, op, int(xq.shape[0]), int(wc.shape[1]))


def _qlinear_bmm(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = qlinear_bmm_tiling(lw, n)
    return None if t is None else out_tile_count(t.out.shape, t.tm, t.tn)


def _bmm(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = bmm_tiling(lw, n)
    return None if t is None else out_tile_count(t.out.shape, t.tm, t.tn)


def _qdq(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    if not qdq_tiled(lw, n):
        return None
    lay = qdq_layout(lw, n)
    return len(layout_blocks(lw, lay) if lay is not None
               else plain_rows(lw, lw.placement(n.inputs[0])))


def _quant_rows(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = quant_tiling(lw, n)
    return None if t is None else len(quant_blocks(lw, t[2]))


def _dynamic_quantize(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    return dynamic_draws(lw, n)


def _kv_update(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    return kv_update_draws(lw, n)


def _copy(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    return copy_draws(lw, n)


def _attention(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    """ATTENTION (`attention_float.lower_any_attention`): float layers one PE per (batch,
    KV group), integer ones as `attention.attention_draws` counts."""
    if float_formats(n) is not None:
        return len(float_groups(lw, n)) if attention_tiled(lw, n) else None
    return attention_draws(lw, n)


def _convert_once(lw: Lowering, x_tid: str, mode: str, bits: int,
                  d: Draws) -> tuple[str | None, int]:
    """(the dtype `prepare_x` gives activation `x_tid`, or None; the PEs its conversion
    draws: only the first layer asking converts)."""
    form = prepared_form(lw, x_tid, mode, bits)
    key = (x_tid, mode, bits)
    if form.memo and key not in d.converted:
        d.converted.add(key)
        return form.dtype, len(form.spans)
    return form.dtype, 0


def _conv(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    """CONV (`conv`): a layer `conv_plan.conv_tiled` refuses runs whole before it prepares
    anything; else its blocks (`conv_tiles.conv_units`) with the activation as the tiles
    read it: int8 data behind a DEQUANTIZE through `prepare_x`, else as it lies."""
    if not conv_tiled(lw, n):
        return None
    drawn = 0
    if dequantized_int8(lw, n.inputs[0], conv_shape(lw, n).mode):
        x_dtype, drawn = _convert_once(lw, n.inputs[0], "int", 8, d)
        xt = x_dtype
    else:
        fa = float_activation(lw, n.inputs[0], conv_shape(lw, n).mode)
        assert fa is not None
        x_dtype, xt = fa[0].dtype, fa[1]
    blk = conv_blocking(lw, n, x_dtype, xt)
    assert blk is not None
    return drawn + conv_units(lw, blk)


def _qlinear_conv(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = qconv_tiling(lw, n)
    if t is None:
        return None
    return conv_units(lw, ConvBlocking(t.geo, t.groups, int(t.wc.shape[0]), t.x.dtype,
                                       t.x.dtype, "int8"))


def _pool(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = pool_tiling(lw, n)
    return None if t is None else len(pool_units(t))


def _reduce(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    t = reduce_tiling(lw, n)
    return None if t is None else len(reduce_blocks(lw, t))


def _rope(lw: Lowering, n: LayerIR, d: Draws) -> int | None:
    geo = rope_tiling(lw, n)
    return None if geo is None else len(rope_blocks(lw, geo))


#: op type → the count of its tiled lowering, tried in the tiling pass's order (None:
#: that lowering gives the layer up without drawing)
COUNTS: dict[str, tuple[Callable[[Lowering, LayerIR, Draws], int | None], ...]] = {
    **{op: (_row_op,) for op in ROW_OPS},
    "ADD": (_row_op, _elementwise), "MUL": (_row_op, _elementwise),
    "ELEMENTWISE": (_clamp, _elementwise), "CUMSUM": (_cumsum,), "EXPAND": (_elementwise,),
    **{op: (_gather,) for op in ("EMBEDDING", "GATHER", "GATHER_ND", "GATHER_ELEMENTS")},
    "GEMM": (_gemm,), "QKV_PROJ": (_gemm,), "MATMUL_INTEGER": (_matmul_integer,),
    "DYNAMIC_QUANTIZE": (_dynamic_quantize,), "MATMUL": (_bmm,),
    "QLINEAR_MATMUL": (_qlinear_matmul, _qlinear_bmm), "QDQ": (_qdq,),
    "QUANTIZE": (_quant_rows,), "DEQUANTIZE": (_quant_rows,), "KV_UPDATE": (_kv_update,),
    **{op: (_copy,) for op in COPY_OPS}, "ROPE": (_rope,),
    "ATTENTION": (_attention,), "CONV": (_conv,), "QLINEAR_CONV": (_qlinear_conv,),
    "POOL": (_pool,), "REDUCE": (_reduce,),
}


def counted(op_type: str) -> bool:
    """Is the draw count of op type `op_type` known (`COUNTS`, or no lowering: whole)?"""
    return op_type in COUNTS


def layer_draws(lw: Lowering, n: LayerIR, d: Draws) -> int:
    """The PEs layer `n` (the next in graph order after those `d` has seen) draws from the
    round-robin on one cube."""
    if takes_no_op(lw, n):
        return 0
    for count in COUNTS.get(n.op_type, ()):
        drawn = count(lw, n, d)
        if drawn is not None:
            return drawn
    return WHOLE


def planned_first_pe(lw: Lowering) -> dict[str, int]:
    """On one cube, every layer with an op of its own → the PE its first tile goes to:
    the PEs the layers before it draw (`layer_draws`), modulo the PEs, in graph order.
    Empty on several cubes (each layer starts at PE 0, a rule of the topology)."""
    if lw.pes.restart_per_layer:
        return {}
    out: dict[str, int] = {}
    d, position = Draws(), 0
    for n in lw.g.nodes:
        if takes_no_op(lw, n):
            continue
        out[n.id] = position % lw.n_pes
        position += layer_draws(lw, n, d)
    return out
