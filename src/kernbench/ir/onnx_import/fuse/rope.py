"""Rotary position embedding (rotate-half form) -> ROPE.

    y = x * cos + concat(-x[..., d/2:], x[..., :d/2]) * sin
"""

from __future__ import annotations

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    ew,
    new_layer,
    onnx_nodes,
    other_input,
    replace,
    rewrite_until_fixed,
)
from kernbench.ir.ops import node_attrs


def _half_slice(g: Graph, n: LayerIR | None, first: bool) -> str | None:
    if n is None or n.op_type != "SLICE":
        return None
    x = n.inputs[0]
    shape = g.tensors[x].shape
    d = shape[-1]
    a = node_attrs(n)
    r = len(shape)
    for ax in range(r - 1):
        if (a.starts[ax], a.ends[ax], a.steps[ax]) != (0, shape[ax], 1):
            return None
    want = (0, d // 2, 1) if first else (d // 2, d, 1)
    if d % 2 or (a.starts[-1], a.ends[-1], a.steps[-1]) != want:
        return None
    return x


def fuse_rope(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)


def _rewrite(g: Graph, ix: Index, cat: LayerIR) -> bool:
    if cat.op_type != "CONCAT" or len(cat.inputs) != 2:
        return False
    rank = len(g.tensors[cat.outputs[0]].shape)
    if node_attrs(cat).axis != rank - 1:
        return False
    neg = ix.prod(cat.inputs[0])
    if ew(neg) != "neg":
        return False
    x2 = _half_slice(g, ix.prod(neg.inputs[0]), first=False)
    x1 = _half_slice(g, ix.prod(cat.inputs[1]), first=True)
    if x2 is None or x2 != x1:
        return False
    x = x1
    rh = cat.outputs[0]
    if not ix.single_use(rh):
        return False
    m2 = ix.uses(rh)[0]
    if ew(m2) != "mul":
        return False
    sin = other_input(m2, rh)
    if not ix.single_use(m2.outputs[0]):
        return False
    add = ix.uses(m2.outputs[0])[0]
    if ew(add) != "add":
        return False
    m1 = ix.prod(other_input(add, m2.outputs[0]) or "")
    if ew(m1) != "mul" or x not in m1.inputs or not ix.single_use(m1.outputs[0]):
        return False
    cos = other_input(m1, x)
    if cos is None or sin is None:
        return False
    if g.tensors[add.outputs[0]].shape != g.tensors[x].shape:
        return False
    chain = [ix.prod(neg.inputs[0]), ix.prod(cat.inputs[1]), neg, cat, m2, m1, add]
    node = new_layer("ROPE", [x, cos, sin], [add.outputs[0]],
                     {"interleaved": False, "rotary_dim": g.tensors[x].shape[-1]}, add,
                     onnx_nodes(*chain))  # fmt: skip
    replace(g, [add], node, add)
    return True
