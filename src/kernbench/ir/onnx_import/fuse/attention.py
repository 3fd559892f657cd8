"""Scaled-dot-product attention subgraph -> ATTENTION.

Anchor: SOFTMAX over the last axis. Walk back: [mask ADD | WHERE] <- scalar MUL/DIV
(scale) <- MATMUL(q', k') ; forward: [WHERE(ISNAN(p), 0, p)] -> MATMUL(p, v'). The q', k', v'
operands are traced back through layout layers (RESHAPE / TRANSPOSE / EXPAND) and scalar
MUL / DIV (more scale) to rank-4 sources; the layout chain is checked by pushing an index
array through it: it must equal the identity (q, v) or a swap of the last two axes (k),
after repeating kv heads (grouped-query attention: num_kv_heads < num_heads).
"""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    ew,
    new_layer,
    onnx_nodes,
    other_input,
    replace,
    rewrite_until_fixed,
    scalar,
)
from kernbench.ir.ops import node_attrs

LAYOUT = ("RESHAPE", "TRANSPOSE", "EXPAND")


def _walk_back(g: Graph, ix: Index, t: str) -> list[tuple[str, list[LayerIR], float]]:
    """Candidate sources of operand t: (tensor, layout chain source->t, scale)."""
    chain: list[LayerIR] = []
    scale = 1.0
    out = [(t, [], 1.0)]
    for _ in range(12):
        p = ix.prod(t)
        if p is None:
            break
        if p.op_type in LAYOUT:
            chain.insert(0, p)
            t = p.inputs[0]
        elif ew(p) in ("mul", "div"):
            s = scalar(g, p.inputs[1])
            if s is None and ew(p) == "mul":
                s = scalar(g, p.inputs[0])
                nxt = p.inputs[1]
            else:
                nxt = p.inputs[0]
            if s is None or s == 0.0:
                break
            scale *= s if ew(p) == "mul" else 1.0 / s
            t = nxt
        else:
            break
        out.append((t, list(chain), scale))
    return out


def _apply(chain: list[LayerIR], a: np.ndarray) -> np.ndarray | None:
    for n in chain:
        try:
            if n.op_type == "RESHAPE":
                a = a.reshape(node_attrs(n).shape)
            elif n.op_type == "TRANSPOSE":
                a = np.transpose(a, node_attrs(n).perm)
            elif n.op_type == "EXPAND":
                a = np.broadcast_to(a, node_attrs(n).shape)
        except ValueError:
            return None
    return a


def _source(g: Graph, ix: Index, t: str, transposed: bool, heads: int | None):
    """Furthest rank-4 source whose layout chain is the expected map."""
    for src, chain, scale in reversed(_walk_back(g, ix, t)):
        shape = g.tensors[src].shape
        if len(shape) != 4:
            continue
        h = shape[1]
        want_heads = heads if heads is not None else h
        if want_heads % h:
            continue
        idx = np.arange(int(np.prod(shape))).reshape(shape)
        exp = np.repeat(idx, want_heads // h, axis=1)
        if transposed:
            exp = np.swapaxes(exp, -1, -2)
        got = _apply(chain, idx)
        if got is None or got.shape != exp.shape or not np.array_equal(got, exp):
            continue
        return src, scale, h
    return None


def _scores(g: Graph, ix: Index, s: str):
    """From the softmax input back to the score MATMUL: (matmul, mask, mask_kind, scale, chain)."""
    chain: list[LayerIR] = []
    mask, kind, scale = None, "none", 1.0
    for _ in range(6):
        p = ix.prod(s)
        if p is None or not ix.single_use(s):
            return None
        if p.op_type == "MATMUL":
            chain.append(p)
            return p, mask, kind, scale, chain
        op = ew(p)
        if op in ("mul", "div") and scalar(g, p.inputs[1]) not in (None, 0.0):
            c = scalar(g, p.inputs[1])
            scale *= c if op == "mul" else 1.0 / c
            s = p.inputs[0]
        elif op == "mul" and scalar(g, p.inputs[0]) is not None:
            scale *= scalar(g, p.inputs[0])
            s = p.inputs[1]
        elif op == "add" and mask is None:
            a, b = p.inputs
            pa, pb = ix.prod(a), ix.prod(b)
            if pa is not None and (pa.op_type == "MATMUL" or ew(pa) in ("mul", "div")):
                s, mask = a, b
            elif pb is not None and (pb.op_type == "MATMUL" or ew(pb) in ("mul", "div")):
                s, mask = b, a
            else:
                return None
            kind = "additive"
        elif op == "where" and mask is None:
            fill = scalar(g, p.inputs[2])
            if fill is None or fill > -1e30:
                return None
            s, mask, kind = p.inputs[1], p.inputs[0], "bool"
        else:
            return None
        chain.append(p)
    return None


def fuse_attention(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)


def _rewrite(g: Graph, ix: Index, sm: LayerIR) -> bool:
    if sm.op_type != "SOFTMAX":
        return False
    rank = len(g.tensors[sm.outputs[0]].shape)
    if rank != 4 or node_attrs(sm).axis != 3:
        return False
    m = _match(g, ix, sm)
    if m is None:
        return False
    q, k, v, mask, kind, scale, hq, hkv, out, chain = m
    d = g.tensors[q].shape[3]
    attrs = {"num_heads": hq, "num_kv_heads": hkv, "head_dim": d, "scale": scale,
             "causal": False, "causal_offset": 0, "softcap": 0.0, "mask": kind}  # fmt: skip
    ins = [q, k, v] + ([mask] if mask else [])
    last = chain[-1]
    node = new_layer("ATTENTION", ins, [out], attrs, last, onnx_nodes(*chain))
    replace(g, [last], node, last)
    return True

def _match(g: Graph, ix: Index, sm: LayerIR):
    p = sm.outputs[0]
    chain = [sm]
    uses = ix.uses(p)
    # optional WHERE(ISNAN(p), 0, p)
    if len(uses) == 2 and p not in ix.outputs:
        isn = next((u for u in uses if ew(u) == "isnan"), None)
        wh = next((u for u in uses if ew(u) == "where"), None)
        if isn is None or wh is None or wh.inputs[0] != isn.outputs[0] or wh.inputs[2] != p \
                or scalar(g, wh.inputs[1]) != 0.0:  # fmt: skip
            return None
        chain += [isn, wh]
        p = wh.outputs[0]
        uses = ix.uses(p)
    if len(uses) != 1 or p in ix.outputs:
        return None
    mm2 = uses[0]
    if mm2.op_type != "MATMUL" or mm2.inputs[0] != p:
        return None
    sc = _scores(g, ix, sm.inputs[0])
    if sc is None:
        return None
    mm1, mask, kind, scale, schain = sc
    qs = _source(g, ix, mm1.inputs[0], False, None)
    if qs is None:
        return None
    q, s_q, hq = qs
    ks = _source(g, ix, mm1.inputs[1], True, hq)
    vs = _source(g, ix, mm2.inputs[1], False, hq)
    if ks is None or vs is None:
        return None
    k, s_k, hkv = ks
    v, s_v, hv = vs
    if hv != hkv or s_v != 1.0:
        return None
    qsh, ksh, vsh = g.tensors[q].shape, g.tensors[k].shape, g.tensors[v].shape
    if qsh[0] != ksh[0] or qsh[3] != ksh[3] or ksh[2] != vsh[2]:
        return None
    if mask is not None:
        msh = g.tensors[mask].shape
        want = [qsh[0], hq, qsh[2], ksh[2]]
        if len(msh) > 4 or any(a not in (1, b) for a, b in zip(msh[::-1], want[::-1], strict=False)):
            return None
    chain = schain[::-1] + chain + [mm2]
    return q, k, v, mask, kind, scale * s_q * s_k, hq, hkv, mm2.outputs[0], chain


__all__ = ["fuse_attention", "other_input"]


def ungroup_kv(g: Graph) -> None:
    """ATTENTION layers (e.g. from ONNX Attention) whose K / V were expanded to all heads
    by layout layers read the grouped source instead (num_kv_heads < num_heads)."""
    ix = Index(g)
    for n in g.nodes:
        if n.op_type != "ATTENTION" or node_attrs(n).num_kv_heads != node_attrs(n).num_heads:
            continue
        hq = node_attrs(n).num_heads
        ks = _source(g, ix, n.inputs[1], False, hq)
        vs = _source(g, ix, n.inputs[2], False, hq)
        if ks is None or vs is None or ks[1] != 1.0 or vs[1] != 1.0 or ks[2] != vs[2]:
            continue
        n.inputs[1], n.inputs[2] = ks[0], vs[0]
        n.attributes["num_kv_heads"] = ks[2]
