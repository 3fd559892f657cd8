"""Which DYNAMIC_QUANTIZE layers and MATMUL_INTEGER → Cast → Mul chains the tiles compute
(`plan_dynamic`, asked by the plan pass; the tiles themselves: `dynq`'s module
docstring): a MATMUL_INTEGER whose output is only cast to fp32 and multiplied by one
scalar becomes an integer GEMM (`integer_matmul`: its re-centered weight, the Cast and the
Mul its epilogue computes), and a DYNAMIC_QUANTIZE is tiled when every reader of its data
and zero point is such a MATMUL_INTEGER.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.te_weights import recentered
from kernbench.compiler.lower.values import IntegerMatmul
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


def _only_consumer(lw: Lowering, tid: str) -> LayerIR | None:
    t = lw.g.tensors[tid]
    if tid in lw.g.outputs or len(t.consumers) != 1:
        return None
    return lw.g.node(t.consumers[0])


def integer_matmul(lw: Lowering, n: LayerIR) -> IntegerMatmul | None:
    """The plan of a MATMUL_INTEGER the tiles can compute (module doc), or None."""
    g = lw.g
    if n.op_type != "MATMUL_INTEGER" or len(n.inputs) < 3 or not n.inputs[2]:
        return None
    w_tid = n.inputs[1]
    wt = g.tensors[w_tid]
    if not wt.const or len(wt.shape) != 2 or g.tensors[n.inputs[0]].const:
        return None
    w = np.asarray(g.weights[w_tid])
    zw = np.asarray(g.weights[n.inputs[3]]) if len(n.inputs) > 3 and n.inputs[3] else None
    if zw is not None and (not g.tensors[n.inputs[3]].const or zw.size not in (1, w.shape[1])):
        return None
    rc = recentered(w, zw, 8)
    cast = _only_consumer(lw, n.outputs[0])
    if rc is None or cast is None or cast.op_type != "ELEMENTWISE" \
            or node_attrs(cast).op != "cast" or node_attrs(cast).to != "fp32":
        return None
    mul = _only_consumer(lw, cast.outputs[0])
    if mul is None or mul.op_type != "MUL" or len(mul.inputs) != 2:
        return None
    others = [t for t in mul.inputs if t != cast.outputs[0]]
    if len(others) != 1 or int(np.prod(g.tensors[others[0]].shape or [1])) != 1:
        return None
    out = lw.plan.placements.get(mul.outputs[0])
    s = lw.placement(others[0])
    if out is None or out.dtype != "fp32" or not out.contiguous or s.dtype != "fp32" \
            or list(g.tensors[mul.outputs[0]].shape) != list(g.tensors[n.outputs[0]].shape):
        return None
    return IntegerMatmul(rc[0], cast, mul, others[0], mul.outputs[0])


def _tiled_consumers(lw: Lowering, n: LayerIR) -> bool:
    """Every reader of the quantized data and the zero point is a MATMUL_INTEGER the tiles
    compute, reading them as its activation and its activation zero point."""
    q, zp = n.outputs[0], n.outputs[2]
    g = lw.g
    if q in g.outputs or zp in g.outputs or not g.tensors[q].consumers:
        return False
    users = {c for t in (q, zp) for c in g.tensors[t].consumers}
    return all(g.node(c).inputs[0] == q and g.node(c).inputs[2] == zp
               and integer_matmul(lw, g.node(c)) is not None for c in users)


def tiles_dynamic_quantize(lw: Lowering, n: LayerIR) -> bool:
    """Can DYNAMIC_QUANTIZE `n` be tiled: fp32 contiguous input whose rows fit a TCM bank,
    read only by MATMUL_INTEGERs the tiles compute (module doc)? The plan pass asks."""
    x = lw.placement(n.inputs[0])
    s_out = lw.plan.placements.get(n.outputs[1])
    if len(n.outputs) != 3 or x.dtype != "fp32" or not x.contiguous or not x.shape \
            or s_out is None or s_out.dtype != "fp32" or lw.g.tensors[n.inputs[0]].const \
            or not _tiled_consumers(lw, n):
        return False
    return rows_cols(x)[1] * 4 <= lw.bank


def plan_dynamic(lw: Lowering) -> tuple[frozenset[str], dict[str, IntegerMatmul]]:
    """The DYNAMIC_QUANTIZE layers the tiles compute, and the MATMUL_INTEGERs reading
    them (each with its weight and the Cast and Mul its epilogue computes)."""
    tiled, matmuls = set(), {}
    for n in lw.g.nodes:
        if n.op_type == "DYNAMIC_QUANTIZE" and tiles_dynamic_quantize(lw, n):
            tiled.add(n.id)
            for c in lw.g.tensors[n.outputs[0]].consumers:
                im = integer_matmul(lw, lw.g.node(c))
                assert im is not None  # _tiled_consumers checked every reader
                matmuls[c] = im
    return frozenset(tiled), matmuls


def minmax_spans(lw: Lowering, x: Placement) -> list[tuple[int, int, int | None]]:
    """The row blocks of a DYNAMIC_QUANTIZE's first phase (the minimum and maximum of
    each, one bank a block at most); each draws a PE."""
    rows, cols = rows_cols(x)
    return lw.row_spans(x, rows, cols, lw.bank // (cols * 4))


def quantize_spans(lw: Lowering, data: Placement) -> list[tuple[int, int, int | None]]:
    """The row blocks of a DYNAMIC_QUANTIZE's third phase over its (rows, cols) int8
    scratch `data` (one per vector engine of every PE when the work pays for it)."""
    rows, cols = rows_cols(data)
    split = lw.engines.ve_blocks(rows, cols, lw.n_pes, "quantize")
    return lw.row_spans(data, rows, cols, lw.bank // (cols * 4), split)


def one_block(lw: Lowering, x: Placement) -> bool:
    """Does a DYNAMIC_QUANTIZE of `x` run every phase on one PE (`x` fits a bank)?"""
    rows, cols = rows_cols(x)
    return rows * cols * 4 <= lw.bank


def dynamic_draws(lw: Lowering, n: LayerIR) -> int | None:
    """The PEs a tiled DYNAMIC_QUANTIZE draws (None: the plan does not tile it): one for a
    tensor of one bank, else the first phase's blocks, the combining PE and the third
    phase's blocks (cut over the input's rows: on one cube its scratch's)."""
    if n.id not in lw.lowering_plan.dynamic_quantize:
        return None
    x = lw.placement(n.inputs[0])
    if one_block(lw, x):
        return 1
    rows, cols = rows_cols(x)
    return len(minmax_spans(lw, x)) + 1 + len(quantize_spans(lw, x.view((rows, cols))))

