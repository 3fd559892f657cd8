"""The MoE layers of an imported ONNX model with gathered experts, as `MoeBlock`s for
expert parallelism (docs/multichip.md).

An export of gpt-fast's `ConditionalFeedForward` (scripts/export_moe_onnx.py) computes
every (token, slot) pair with the weights of its expert gathered by the router's top-k
indices:

    vals, idx = TOPK(logits);  w = SOFTMAX(vals)
    W1[idx], W3[idx], W2[idx]  GATHER of the stacked expert weights [E, …] on axis 0
    h = SILU(x_k · W1[idx]) ⊙ (x_k · W3[idx]);  y_e = h · W2[idx]   (x_k: x viewed / expanded)
    out = w · y_e  (a MATMUL over the k slots, viewed back to x's shape [T, d])

`find_gathered` recognises it (the up projection is the MATMUL whose output does not feed
the SiLU; the down projection the one whose input is a MUL) and returns its block: the
nodes from the gathers and x's views to `out` are the ones the rank's nodes replace.
`split_experts` gives every expert its own weight constants
(`moe<i>.experts.<e>.{gate,up,down}.weight`, slices of the stacks), which the rank's
expert GEMMs read; the stacks go when nothing else reads them.
"""

from __future__ import annotations

import numpy as np

from kernbench.compiler.parallel.ep_graph import MoeBlock
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.ops import node_attrs

#: ops between x [T, d] and the experts' first MATMUL
_VIEWS = {"RESHAPE", "EXPAND", "UNSQUEEZE", "TRANSPOSE"}


def _consumers(g: Graph, tid: str) -> list[LayerIR]:
    return [g.node(c) for c in g.tensors[tid].consumers]


def _only(g: Graph, tid: str, op: str) -> LayerIR | None:
    cs = _consumers(g, tid)
    return cs[0] if len(cs) == 1 and cs[0].op_type == op else None


def _parts(g: Graph, topk: LayerIR) -> dict[str, tuple[str, LayerIR]] | None:
    """{gate | up | down: (the weight stack, its MATMUL)} of a TOPK's gathers."""
    idx = topk.outputs[1]
    found: dict[str, tuple[str, LayerIR]] = {}
    for gat in _consumers(g, idx):
        stack = gat.inputs[0]
        if gat.op_type != "GATHER" or gat.inputs[1] != idx or not g.tensors[stack].const \
                or len(g.tensors[stack].shape) != 3 or int(node_attrs(gat).axis):
            return None
        mm = _only(g, gat.outputs[0], "MATMUL")
        if mm is None or mm.inputs[1] != gat.outputs[0]:
            return None
        a = g.tensors[mm.inputs[0]].producer
        nxt = _consumers(g, mm.outputs[0])
        if a is not None and g.node(a).op_type == "MUL":
            part = "down"
        elif any(n.op_type == "SILU" for n in nxt):
            part = "gate"
        else:
            part = "up"
        if part in found:
            return None
        found[part] = (stack, mm)
    return found if set(found) == {"gate", "up", "down"} else None


def _source(g: Graph, tid: str) -> str:
    """`tid` back through views to the tensor they view."""
    while (p := g.tensors[tid].producer) is not None and g.node(p).op_type in _VIEWS:
        tid = g.node(p).inputs[0]
    return tid


def _removed(g: Graph, out: str, stop: set[str]) -> set[str] | None:
    """The nodes `out` is computed by back to the tensors in `stop` (and constants);
    None when one of them is also read outside."""
    seen: set[str] = set()
    todo = [out]
    while todo:
        tid = todo.pop()
        p = g.tensors[tid].producer
        if tid in stop or p is None or p in seen:
            continue
        seen.add(p)
        todo += [x for x in g.node(p).inputs if x and not g.tensors[x].const]
    for nid in seen:
        for o in g.node(nid).outputs:
            if o != out and any(c not in seen for c in g.tensors[o].consumers):
                return None
    return seen


def find_gathered(g: Graph) -> list[MoeBlock]:
    """The gathered-expert MoE layers of `g` (module docstring), in graph order."""
    pos = {n.id: i for i, n in enumerate(g.nodes)}
    blocks = []
    for topk in [n for n in g.nodes if n.op_type == "TOPK" and len(n.outputs) == 2]:
        parts = _parts(g, topk)
        soft = _only(g, topk.outputs[0], "SOFTMAX")
        if parts is None or soft is None:
            continue
        idx = topk.outputs[1]
        t, k = g.tensors[idx].shape
        x = _source(g, parts["gate"][1].inputs[0])
        if g.tensors[x].shape[0] != t or len(g.tensors[x].shape) != 2:
            continue
        out = parts["down"][1].outputs[0]
        for _ in range(6):  # forward through the weighting to a tensor shaped like x
            if g.tensors[out].shape == g.tensors[x].shape:
                break
            nxt = _consumers(g, out)
            if len(nxt) != 1:
                break
            out = nxt[0].outputs[0]
        if g.tensors[out].shape != g.tensors[x].shape:
            continue
        removed = _removed(g, out, {x, idx, soft.outputs[0]})
        if removed is None:
            continue
        at = min(pos[i] for i in removed)
        if any(pos.get(g.tensors[s].producer or "", -1) > at for s in (x, soft.outputs[0])):
            continue
        e_n = g.tensors[parts["gate"][0]].shape[0]
        b = MoeBlock(f"moe{len(blocks)}.", x, idx, soft.outputs[0], out, e_n, k,
                     removed, at)
        b.meta["stacks"] = {p: s for p, (s, _) in parts.items()}
        blocks.append(b)
    return blocks


def split_experts(g: Graph, blocks: list[MoeBlock]) -> None:
    """Per-expert weight constants from each block's stacks (module docstring)."""
    for b in blocks:
        stacks = b.meta.pop("stacks")
        for part, stack in stacks.items():
            w = np.asarray(g.weights[stack])
            st = g.tensors[stack]
            for e in range(b.n_experts):
                tid = b.weight(e, part)
                g.tensors[tid] = TensorIR(id=tid, shape=list(st.shape[1:]), dtype=st.dtype,
                                          const=True, role="weight")
                g.weights[tid] = np.ascontiguousarray(w[e])
            if all(c in b.removed for c in st.consumers):
                del g.tensors[stack]
                del g.weights[stack]
