"""Decomposed LayerNorm -> LAYER_NORM (what exporters write below opset 17, or whenever
they do not emit LayerNormalization).

    x -> ReduceMean(last axis, keepdims) = m
    d = Sub(x, m)
    d -> [the RMSNorm chain of `rms_norm` on d: Pow(d, 2) | Mul(d, d) -> ReduceMean (same
          axis) -> Add(eps) -> Sqrt -> Div(d, .) | Reciprocal -> Mul(d, .)]
      [-> Mul(weight)] [-> Add(bias)]

The epsilon, the weight and the bias are read from the graph (a weight or a bias that is
not a constant vector of the normalized length stays a layer of its own after the
LAYER_NORM). Anything else is left unfused: a mean over another axis, d = m - x, a mean
or a d that something outside the pattern also reads.
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
)
from kernbench.ir.onnx_import.fuse.rms_norm import match_rms
from kernbench.ir.ops import node_attrs


def _mean_of_last(g: Graph, n: LayerIR) -> bool:
    if n.op_type != "REDUCE":
        return False
    a = node_attrs(n)
    rank = len(g.tensors[n.inputs[0]].shape)
    return a.op == "mean" and bool(a.keepdims) and rank > 0 and list(a.axes) == [rank - 1]


def _variance(g: Graph, ix: Index, d: str) -> LayerIR | None:
    """The mean of squares of `d` (the REDUCE reading Pow(d, 2) or Mul(d, d)), if any."""
    for u in ix.uses(d):
        out = u.outputs[0]
        if ew(u) in ("pow", "mul") and ix.single_use(out):
            red = ix.uses(out)[0]
            if _mean_of_last(g, red):
                return red
    return None


def _bias(g: Graph, ix: Index, y: str, d: int) -> tuple[str, LayerIR] | None:
    """(bias, its Add) when `y`'s only reader adds a constant vector of length d."""
    if not ix.single_use(y):
        return None
    add = ix.uses(y)[0]
    b = other_input(add, y) if ew(add) == "add" else None
    v = const_value(g, b) if b else None
    if b is None or v is None or v.ndim != 1 or v.shape[0] != d:
        return None
    return b, add


def _rewrite(g: Graph, ix: Index, red: LayerIR) -> bool:
    if not _mean_of_last(g, red):
        return False
    x, m = red.inputs[0], red.outputs[0]
    if not ix.single_use(m):
        return False
    sub = ix.uses(m)[0]
    if ew(sub) != "sub" or sub.inputs != [x, m] or sub.outputs[0] in ix.outputs:
        return False
    d = sub.outputs[0]
    var = _variance(g, ix, d)
    found = match_rms(g, ix, var) if var is not None else None
    if found is None or found[0] != d:
        return False
    _, eps, weight, y, chain = found
    if any(all(u is not c for c in chain) for u in ix.uses(d)):
        return False  # d is read outside the pattern
    rank = len(g.tensors[x].shape)
    n = g.tensors[x].shape[-1]
    if weight is None:
        weight = add_const(g, f"{y}.ln_weight", np.ones(n, np.float32))
    inputs = [x, weight]
    bias = _bias(g, ix, y, n)
    chain = [red, sub, *chain]
    if bias is not None:
        inputs.append(bias[0])
        chain.append(bias[1])
        y = bias[1].outputs[0]
    node = new_layer("LAYER_NORM", inputs, [y], {"axis": rank - 1, "eps": eps}, chain[-1],
                     onnx_nodes(*chain))
    replace(g, chain, node, chain[-1])
    return True


def fuse_layer_norm(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)
