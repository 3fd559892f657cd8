"""Elementwise activation subgraphs -> GELU (erf or tanh form) / SILU.

Exporters spell these in many orders (x*0.5*(1+erf(x/sqrt2)), 0.5*x*(1+tanh(...)),
x*sigmoid(x), ...). Instead of listing the orders, a candidate region is cut out of the
graph around an anchor (Erf / Tanh / Sigmoid) and identified numerically: the region,
evaluated on test points, must equal the anchor's target function (Erf: GELU, Tanh: GELU
tanh form, Sigmoid: SiLU) to 1e-5, or, in an fp16 / bf16 graph, to the precision of that
type (its constants, e.g. 1/√2 or 0.044715, are stored rounded to it; the fused op
computes in fp32 and rounds once, no less exact than the spelled-out region).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from kernbench.ir.interpreter import KERNELS
from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    const_value,
    ew,
    new_layer,
    onnx_nodes,
    replace,
    rewrite_until_fixed,
)

ANCHORS = {"erf", "tanh", "sigmoid"}
EW_OPS = {"add", "sub", "mul", "div", "pow", "erf", "tanh", "sigmoid", "sqrt", "neg"}
_X = np.linspace(-6.0, 6.0, 241, dtype=np.float32)


def _gelu_erf(x):
    return 0.5 * x * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x], np.float64))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x):
    return x / (1.0 + np.exp(-x))


#: (anchor op, fused op, its attributes, its values on _X)
TARGETS = [
    ("erf", "GELU", {"approximate": "none"}, _gelu_erf(_X.astype(np.float64))),
    ("tanh", "GELU", {"approximate": "tanh"}, _gelu_tanh(_X.astype(np.float64))),
    ("sigmoid", "SILU", {}, _silu(_X.astype(np.float64))),
]
#: how closely the region must match its target, per float type of the region's input
MATCH_TOL = {"fp32": 1e-5, "fp16": float(np.finfo(np.float16).eps),
             "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)}


def _is_ew(g: Graph, n: LayerIR) -> bool:

    op = ew(n)
    if op not in EW_OPS or len(n.outputs) != 1:
        return False
    for i in n.inputs:
        v = const_value(g, i)
        if g.tensors[i].const and (v is None or v.size != 1):
            return False
    return True


def _region(g: Graph, ix: Index, x: str) -> list[LayerIR]:
    """Elementwise layers reachable from x whose non-constant inputs are all x or
    produced inside the region (graph order)."""
    inside: set[str] = {x}
    members: list[LayerIR] = []
    start = ix.pos[id(ix.uses(x)[0])] if ix.uses(x) else len(g.nodes)
    for n in g.nodes[start:]:
        if not _is_ew(g, n):
            continue
        nonconst = [i for i in n.inputs if not g.tensors[i].const]
        if nonconst and all(i in inside for i in nonconst):
            members.append(n)
            inside.add(n.outputs[0])
        if len(members) > 16:
            break
    return members


def _evaluate(g: Graph, sub: list[LayerIR], x: str, y: str) -> np.ndarray | None:

    env = {x: _X.astype(np.float64)}
    for n in sub:
        ins = []
        for i in n.inputs:
            if i in env:
                ins.append(env[i])
            else:
                v = const_value(g, i)
                if v is None:
                    return None
                ins.append(v.astype(np.float64).reshape(()))
        with np.errstate(all="ignore"):
            out = KERNELS[n.op_type](None, n, ins)  # type: ignore[arg-type]
        env[n.outputs[0]] = np.asarray(out[0], np.float64)
    return env.get(y)


def _try_anchor(g: Graph, ix: Index, anchor: LayerIR) -> tuple | None:
    # candidate roots: ancestors of the anchor through elementwise layers, nearest first
    roots: list[str] = []
    frontier = [anchor]
    seen: set[int] = set()
    while frontier and len(roots) < 12:
        n = frontier.pop(0)
        if id(n) in seen:
            continue
        seen.add(id(n))
        for i in n.inputs:
            if g.tensors[i].const or i in roots:
                continue
            roots.append(i)
            p = ix.prod(i)
            if p is not None and _is_ew(g, p):
                frontier.append(p)
    for x in roots:
        tol = MATCH_TOL.get(g.tensors[x].dtype)
        if tol is None:
            continue
        region = _region(g, ix, x)
        if anchor not in region:
            continue
        for end in reversed(region):
            y = end.outputs[0]
            # the layers of the region that y depends on
            need = {y}
            sub: list[LayerIR] = []
            for n in reversed(region):
                if n.outputs[0] in need:
                    sub.append(n)
                    need.update(i for i in n.inputs if i != x)
            sub.reverse()
            if anchor not in sub:
                continue
            produced = {n.outputs[0] for n in sub}
            if any(t != y and (t in ix.outputs or any(u not in sub for u in ix.uses(t)))
                   for t in produced):  # fmt: skip
                continue
            got = _evaluate(g, sub, x, y)
            if got is None:
                continue
            for anchor_op, op, attrs, want in TARGETS:
                if anchor_op == ew(anchor) and np.allclose(got, want, rtol=tol, atol=tol):
                    return op, attrs, x, y, sub
    return None


def fuse_activations(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)


def _rewrite(g: Graph, ix: Index, n: LayerIR) -> bool:

    if ew(n) not in ANCHORS:
        return False
    m = _try_anchor(g, ix, n)
    if m is None:
        return False
    op, attrs, x, y, sub = m
    last = next(s for s in sub if s.outputs[0] == y)
    node = new_layer(op, [x], [y], dict(attrs), last, onnx_nodes(*sub))

    replace(g, sub, node, last)
    return True
