"""Decomposed RMSNorm -> RMS_NORM.

    x -> Pow(x, 2) | Mul(x, x) -> ReduceMean(last axis, keepdims) -> Add(eps)
      -> Sqrt -> Reciprocal | Div(1, .)  -> Mul(x, .)            [-> Mul(weight)]
      -> Sqrt                            -> Div(x, .)            [-> Mul(weight)]
"""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    add_const,
    const_value,
    ew,
    new_layer,
    onnx_nodes,
    other_input,
    replace,
    rewrite_until_fixed,
    scalar,
)
from kernbench.ir.ops import node_attrs


def _is_two(g: Graph, tid: str) -> bool:
    """A constant scalar 2 (a float or an integer exponent)."""
    v = const_value(g, tid)
    return v is not None and v.size == 1 and v.dtype.kind in "fiuV" \
        and float(v.reshape(-1)[0]) == 2.0


def match_rms(g: Graph, ix: Index, red: LayerIR) -> tuple | None:
    """The RMSNorm chain from the mean of squares `red` on: (x, eps, weight or None, y,
    chain), or None. The decomposed LayerNorm (`layer_norm`) ends in this chain on x - mean."""
    a = node_attrs(red)
    if a.op != "mean" or not a.keepdims:
        return None
    sq = ix.prod(red.inputs[0])
    if sq is None or not ix.single_use(red.inputs[0]):
        return None
    if ew(sq) == "pow" and _is_two(g, sq.inputs[1]) or ew(sq) == "mul" and sq.inputs[0] == sq.inputs[1]:
        x = sq.inputs[0]
    else:
        return None
    rank = len(g.tensors[x].shape)
    if a.axes != [rank - 1]:
        return None
    chain = [sq, red]
    t = red.outputs[0]
    uses = ix.uses(t)
    if len(uses) != 1 or ew(uses[0]) != "add" or not ix.single_use(t):
        return None
    add = uses[0]
    eps = scalar(g, other_input(add, t) or "")
    if eps is None:
        return None
    chain.append(add)
    t = add.outputs[0]
    if not ix.single_use(t) or ew(ix.uses(t)[0]) != "sqrt":
        return None
    sqrt = ix.uses(t)[0]
    chain.append(sqrt)
    t = sqrt.outputs[0]
    if not ix.single_use(t):
        return None
    nxt = ix.uses(t)[0]
    if ew(nxt) == "reciprocal" or (ew(nxt) == "div" and nxt.inputs[1] == t
                                   and scalar(g, nxt.inputs[0]) == 1.0):  # fmt: skip
        chain.append(nxt)
        t = nxt.outputs[0]
        if not ix.single_use(t):
            return None
        mul = ix.uses(t)[0]
        if ew(mul) != "mul" or other_input(mul, t) != x:
            return None
    elif ew(nxt) == "div" and nxt.inputs == [x, t]:
        mul = nxt
    else:
        return None
    chain.append(mul)
    y = mul.outputs[0]
    weight = None
    if ix.single_use(y):
        wm = ix.uses(y)[0]
        wv = const_value(g, other_input(wm, y) or "") if ew(wm) == "mul" else None
        if wv is not None and wv.ndim == 1 and wv.shape[0] == g.tensors[x].shape[-1]:
            weight = other_input(wm, y)
            chain.append(wm)
            y = wm.outputs[0]
    return x, eps, weight, y, chain


def fuse_rms_norm(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)


def _rewrite(g: Graph, ix: Index, red: LayerIR) -> bool:
    if red.op_type != "REDUCE":
        return False
    m = match_rms(g, ix, red)
    if m is None:
        return False
    x, eps, weight, y, chain = m
    if weight is None:
        d = g.tensors[x].shape[-1]
        weight = add_const(g, f"{y}.rms_weight", np.ones(d, np.float32))
    rank = len(g.tensors[x].shape)
    node = new_layer("RMS_NORM", [x, weight], [y], {"axis": rank - 1, "eps": eps},
                     chain[-1], onnx_nodes(*chain))  # fmt: skip
    replace(g, chain, node, chain[-1])
    return True
