"""Scaled-dot-product attention found by dataflow -> ATTENTION.

Anchor: a SOFTMAX over the last axis whose probabilities (optionally through
WHERE(ISNAN(p), 0, p) or a Reshape keeping the last two axes) are the left operand
of a MATMUL / Einsum with V. Walking back from the softmax input to the score MATMUL /
Einsum, in this order from the softmax:

1. additive biases (ADD of any tensor broadcastable to the scores: causal / padding /
   sliding-window masks, ALiBi, relative position bias) and one boolean WHERE(mask, s,
   -inf) mask; several are summed into one bias input;
2. an optional soft-cap c2·tanh(c1·x) (the IR's `softcap` = c2, times outer factors);
3. scalar Mul / Div anywhere (also on Q and K, see `head_layout`) and Reshapes that keep
   the last two axes.

QDQ attention (a quantize_static export): when Q, K and V each come through a
per-tensor 8-bit QDQ, the attention is fused too, as an integer ATTENTION (imported bits:
activation 8, KV 8) that quantizes Q, K and V itself; the QDQs on the operands, on the
scores and on the probabilities are part of the match (the ATTENTION's own quantization
stands for them: symmetric static Q / K / V scales, a per-row scale for P). A QDQ on
the scores or probabilities without quantized Q, K, V is not fused: its matmuls run as
tiled batched GEMMs (compiler/lower/bmm.py) with the QDQ layers kept.

Q, K and V are traced by `head_layout.head_source` (heads split by Reshape / Transpose in
any order, GQA / MQA by Expand / Tile / broadcasting). The matmuls' batch dims are split
into (B, H) by the first factorization for which all three operands are found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    add_const,
    add_tensor,
    ew,
    new_layer,
    onnx_nodes,
    qdq8,
    rewrite_until_fixed,
    scalar,
)
from kernbench.ir.onnx_import.fuse.head_layout import Operand, Step, head_source, materialize
from kernbench.ir.ops import node_attrs

MATMULS = ("MATMUL", "EINSUM")


@dataclass
class Scores:
    """The score side of an attention: its matmul, the scalar scale and soft-cap, the
    additive biases and boolean mask (each with the scores' shape where it is applied)
    and the layers between the matmul and the softmax (matmul first)."""

    mm: LayerIR
    scale: float = 1.0
    softcap: float = 0.0
    biases: list[tuple[str, list[int]]] = field(default_factory=list)
    bool_mask: tuple[str, list[int]] | None = None
    layers: list[LayerIR] = field(default_factory=list)
    qdqs: int = 0  # per-tensor 8-bit QDQs on the way


def _scalar_operand(g: Graph, n: LayerIR) -> tuple[float, str] | None:
    """(factor, other input) of a Mul / Div by a nonzero scalar constant."""
    op = ew(n)
    if op not in ("mul", "div") or len(n.inputs) != 2:
        return None
    c, nxt = scalar(g, n.inputs[1]), n.inputs[0]
    if c is None and op == "mul":
        c, nxt = scalar(g, n.inputs[0]), n.inputs[1]
    if c is None or c == 0.0:
        return None
    return (c if op == "mul" else 1.0 / c), nxt


def _softcap(g: Graph, ix: Index, n: LayerIR):
    """(c2, c1, inner input, [tanh, inner layer]) of n = c2 · tanh(c1 · x), else None."""
    so = _scalar_operand(g, n)
    if so is None or ew(n) != "mul":
        return None
    c2, th = so
    t = ix.prod(th)
    if ew(t) != "tanh" or not ix.single_use(th):
        return None
    inner = ix.prod(t.inputs[0])
    si = _scalar_operand(g, inner) if inner is not None and ix.single_use(t.inputs[0]) else None
    if si is None:
        return None
    return c2, si[0], si[1], [inner, t]


def _reaches_mm(g: Graph, ix: Index, t: str) -> bool:
    """t is (through single-use score layers) the output of a MATMUL / Einsum."""
    for _ in range(24):
        p = ix.prod(t)
        if p is None or not ix.single_use(t):
            return False
        if p.op_type in MATMULS:
            return True
        shape = g.tensors[t].shape
        nxt = [i for i in p.inputs if i and not g.tensors[i].const
               and g.tensors[i].shape[-2:] == shape[-2:]]
        if ew(p) == "where":
            nxt = p.inputs[1:2]
        if qdq8(g, p):
            nxt = p.inputs[:1]
        elif p.op_type not in ("RESHAPE", "ADD", "MUL", "ELEMENTWISE") or not nxt:
            return False
        if len(nxt) > 1:
            return any(_reaches_mm(g, ix, i) for i in nxt)
        t = nxt[0]
    return False


def _step_back(g: Graph, ix: Index, sc: Scores, p: LayerIR, s: str) -> str | None:
    """The scores tensor before layer p (which produces s), updating sc; None: no match."""
    shape = list(g.tensors[s].shape)
    free = sc.softcap == 0.0 and sc.scale == 1.0  # nothing between here and the softmax
    if p.op_type == "RESHAPE" and g.tensors[p.inputs[0]].shape[-2:] == shape[-2:]:
        return p.inputs[0]
    if qdq8(g, p):
        sc.qdqs += 1
        return p.inputs[0]
    cap = _softcap(g, ix, p) if sc.softcap == 0.0 else None
    if cap is not None:
        c2, c1, nxt, more = cap
        if sc.scale * c2 <= 0:
            return None
        sc.softcap = sc.scale * c2
        sc.scale *= c2 * c1
        sc.layers += more[::-1]
        return nxt
    so = _scalar_operand(g, p)
    if so is not None:
        sc.scale *= so[0]
        return so[1]
    if ew(p) == "add" and free and sc.softcap == 0.0:
        ins = [i for i in p.inputs if list(g.tensors[i].shape) == shape
               and not g.tensors[i].const and _reaches_mm(g, ix, i)]
        if len(ins) != 1:
            return None
        bias = p.inputs[1] if p.inputs[0] == ins[0] else p.inputs[0]
        if g.tensors[bias].dtype not in ("fp32", "fp16", "bf16"):
            return None
        sc.biases.append((bias, shape))
        return ins[0]
    if ew(p) == "where" and free and sc.bool_mask is None:
        fill = scalar(g, p.inputs[2])
        if fill is None or fill > -1e30 or list(g.tensors[p.inputs[1]].shape) != shape:
            return None
        sc.bool_mask = (p.inputs[0], shape)
        return p.inputs[1]
    return None


def _scores(g: Graph, ix: Index, s: str) -> Scores | None:
    """Walk back from the softmax input to the score matmul (see the module doc)."""
    sc = Scores(mm=None)  # type: ignore[arg-type]
    for _ in range(24):
        p = ix.prod(s)
        if p is None or not ix.single_use(s):
            return None
        if p.op_type in MATMULS:
            sc.mm = p
            sc.layers = [p] + sc.layers[::-1]
            return sc
        nxt = _step_back(g, ix, sc, p, s)
        if nxt is None:
            return None
        sc.layers.append(p)
        s = nxt
    return None


def _mm_operands(g: Graph, n: LayerIR) -> tuple[str, str, list[Step], list[Step]] | None:
    """(a, b, steps making a (…, M, K), steps making b (…, K, N)) of a MATMUL or of an
    Einsum that is one (batch letters first in its output, then M, N)."""
    if n.op_type == "MATMUL":
        return n.inputs[0], n.inputs[1], [], []
    if n.op_type != "EINSUM":
        return None
    eq = node_attrs(n).equation
    if len(n.inputs) != 2 or "->" not in eq or "..." in eq:
        return None
    lhs, out = eq.split("->")
    if lhs.count(",") != 1:
        return None
    x, y = lhs.split(",")
    if any(len(set(s)) != len(s) for s in (x, y, out)):
        return None
    batch = [c for c in out if c in x and c in y]
    m = [c for c in x if c in out and c not in y]
    nn = [c for c in y if c in out and c not in x]
    k = [c for c in x if c in y and c not in out]
    if len(m) != 1 or len(nn) != 1 or len(k) != 1 or out != "".join(batch + m + nn) \
            or len(x) != len(batch) + 2 or len(y) != len(batch) + 2:  # fmt: skip
        return None
    pa = [x.index(c) for c in batch + m + k]
    pb = [y.index(c) for c in batch + k + nn]
    return n.inputs[0], n.inputs[1], [("TRANSPOSE", tuple(pa))], [("TRANSPOSE", tuple(pb))]


def _probs_use(g: Graph, ix: Index, sm: LayerIR):
    """(P·V matmul, layers after the softmax up to it) when the probabilities only feed
    the left operand of one matmul."""
    p = sm.outputs[0]
    chain: list[LayerIR] = []
    uses = ix.uses(p)
    if len(uses) == 2 and p not in ix.outputs:  # WHERE(ISNAN(p), 0, p)
        isn = next((u for u in uses if ew(u) == "isnan"), None)
        wh = next((u for u in uses if ew(u) == "where"), None)
        if isn is None or wh is None or wh.inputs[0] != isn.outputs[0] or wh.inputs[2] != p \
                or scalar(g, wh.inputs[1]) != 0.0:  # fmt: skip
            return None
        chain += [isn, wh]
        p = wh.outputs[0]
    for _ in range(4):
        if not ix.single_use(p):
            return None
        u = ix.uses(p)[0]
        if u.op_type in MATMULS and u.inputs[0] == p:
            ops = _mm_operands(g, u)
            if ops is None or ops[2] not in ([], [("TRANSPOSE", tuple(range(len(
                    g.tensors[p].shape))))]):  # fmt: skip
                return None
            return u, chain
        keep = g.tensors[u.inputs[0]].shape[-2:] == g.tensors[u.outputs[0]].shape[-2:]
        if not (u.op_type == "RESHAPE" and keep or qdq8(g, u)):
            return None
        chain.append(u)
        p = u.outputs[0]
    return None


def fuse_attention(g: Graph) -> None:
    """Rewrite every attention subgraph the dataflow matcher finds into ATTENTION."""
    rewrite_until_fixed(g, _rewrite)


def _factorizations(batch: list[int]) -> list[tuple[int, int]]:
    n = int(np.prod(batch)) if batch else 1
    out = []
    if len(batch) >= 2:
        out.append((int(np.prod(batch[:-1])), batch[-1]))
    out += [(b, n // b) for b in range(1, n + 1) if n % b == 0 and (b, n // b) not in out]
    return out


def _operands(g: Graph, ix: Index, mm1: LayerIR, mm2: LayerIR):
    """(q, k, v Operands, B) for the first (B, H) split of the batch dims that works."""
    o1, o2 = _mm_operands(g, mm1), _mm_operands(g, mm2)
    if o1 is None or o2 is None:
        return None
    batch = list(g.tensors[mm1.outputs[0]].shape[:-2])
    batch2 = tuple(g.tensors[mm2.outputs[0]].shape[:-2])
    if int(np.prod(batch2 or (1,))) != int(np.prod(batch or [1])):
        return None
    for bsz, h in _factorizations(batch):
        kw = {"batch": tuple(batch), "bsz": bsz, "heads": h}
        q = head_source(g, ix, o1[0], transposed=False, pre=o1[2], fixed_kv=h, **kw)
        k = head_source(g, ix, o1[1], transposed=True, pre=o1[3], **kw) if q else None
        v = head_source(g, ix, o2[1], transposed=False, pre=o2[3], scalable=False,
                        fixed_kv=k.shape[1], **{**kw, "batch": batch2}) if k else None
        if q and k and v and q.shape[0] == k.shape[0] == v.shape[0] \
                and q.shape[3] == k.shape[3] and k.shape[2] == v.shape[2]:  # fmt: skip
            return q, k, v, bsz
    return None


def _bias4(g: Graph, tid: str, at: list[int], bsz: int, h: int) -> list[int] | None:
    """The rank-4 (b, h, s, t) shape of a bias applied to scores of shape `at`."""
    bs = [1] * (len(at) - len(g.tensors[tid].shape)) + list(g.tensors[tid].shape)
    if len(bs) != len(at):
        return None
    lead, tail = bs[:-2], bs[-2:]
    if all(d == 1 for d in lead):
        return [1, 1] + tail
    if list(at[:-2]) == [bsz, h]:
        return lead + tail
    if lead == list(at[:-2]) and int(np.prod(lead)) == bsz * h:
        return [bsz, h] + tail
    return None


def _mask(g: Graph, sc: Scores, bsz: int, h: int, s_t: list[int], like: LayerIR):
    """(mask tensor or None, "additive" / "bool" / "none", new layers) for the biases."""
    new: list[LayerIR] = []
    parts: list[str] = []
    items = list(sc.biases) + ([sc.bool_mask] if sc.bool_mask else [])
    for tid, at in items:
        shp = _bias4(g, tid, at, bsz, h)
        if shp is None:
            return None
        t = g.tensors[tid]
        if list(t.shape) != shp:
            r = add_tensor(g, f"{tid}.b4", shp, t.dtype)
            new.append(new_layer("RESHAPE", [tid], [r], {"shape": list(shp), "view": True},
                                 like, []))  # fmt: skip
            tid = r
        parts.append(tid)
    if not parts:
        return None, "none", new
    if len(parts) == 1 and sc.bool_mask and g.tensors[parts[0]].const:
        return parts[0], "bool", new
    if sc.bool_mask:  # a computed boolean mask joins the additive biases as 0 / -inf
        bm = parts[-1]
        zero = add_const(g, f"{bm}.zero", np.zeros((), np.float32))
        ninf = add_const(g, f"{bm}.ninf", np.array(-np.inf, np.float32))
        fb = add_tensor(g, f"{bm}.bias", g.tensors[bm].shape, "fp32")
        new.append(new_layer("ELEMENTWISE", [bm, zero, ninf], [fb], {"op": "where"}, like, []))
        parts[-1] = fb
    acc = parts[0]
    for other in parts[1:]:
        shp = list(np.broadcast_shapes(tuple(g.tensors[acc].shape), tuple(g.tensors[other].shape)))
        t = add_tensor(g, f"{acc}.sum", shp, "fp32")
        new.append(new_layer("ADD", [acc, other], [t], {}, like, []))
        acc = t
    shp = list(g.tensors[acc].shape)
    if shp[-2:] != s_t:  # the tiles read whole (S, T) rows of the bias
        full = shp[:2] + s_t
        t = add_tensor(g, f"{acc}.full", full, "fp32")
        new.append(new_layer("EXPAND", [acc], [t], {"shape": full}, like, []))
        acc = t
    return acc, "additive", new


def _rewrite(g: Graph, ix: Index, sm: LayerIR) -> bool:
    if sm.op_type != "SOFTMAX":
        return False
    rank = len(g.tensors[sm.outputs[0]].shape)
    if rank < 3 or node_attrs(sm).axis not in (rank - 1, -1):
        return False
    pu = _probs_use(g, ix, sm)
    sc = _scores(g, ix, sm.inputs[0]) if pu is not None else None
    if sc is None:
        return False
    mm2, after = pu
    ops = _operands(g, ix, sc.mm, mm2)
    if ops is None:
        return False
    q, k, v, bsz = ops
    quantized = [_quantized(g, ix, op) for op in (q, k, v)]
    qdq_around = sc.qdqs > 0 or any(n.op_type == "QDQ" for n in after)
    if any(quantized) != all(quantized) or qdq_around and not all(quantized):
        return False  # part of it quantized: not one ATTENTION's numerics
    hq = q.shape[1]
    s_t = [q.shape[2], k.shape[2]]
    m = _mask(g, sc, bsz, hq, s_t, mm2)
    if m is None:
        return False
    mask, kind, new = m
    ins = []
    for op in (q, k, v):
        tid, made = materialize(g, op, mm2)
        ins.append(tid)
        new += made
    attrs = {"num_heads": hq, "num_kv_heads": k.shape[1], "head_dim": q.shape[3],
             "scale": sc.scale * q.scale * k.scale, "causal": False, "causal_offset": 0,
             "softcap": sc.softcap, "mask": kind}  # fmt: skip
    node = _emit(g, (sc, sm, after, mm2), ins + ([mask] if mask else []), attrs, new)
    if all(quantized):  # integer attention at the QDQs' 8 bits
        node.metadata["imported_qbits"] = {"activation": 8, "kv": 8}
    return True


def _quantized(g: Graph, ix: Index, op: Operand) -> bool:
    """The operand came through a per-tensor 8-bit QDQ (walked through, or its source)."""
    return any(qdq8(g, n) for n in op.layers) or qdq8(g, ix.prod(op.src))


def _emit(g: Graph, match: tuple[Scores, LayerIR, list[LayerIR], LayerIR], ins: list[str],
          attrs: dict, new: list[LayerIR]) -> LayerIR:
    """Insert the new layers and the ATTENTION (plus a view to mm2's output shape) at mm2;
    the replaced layers become dead. Returns the ATTENTION."""
    sc, sm, after, mm2 = match
    out = mm2.outputs[0]
    want = [g.tensors[ins[0]].shape[0], attrs["num_heads"], g.tensors[ins[0]].shape[2],
            g.tensors[ins[2]].shape[3]]
    att_out = out
    if list(g.tensors[out].shape) != want:
        att_out = add_tensor(g, f"{out}.bhsd", want, g.tensors[out].dtype)
    node = new_layer("ATTENTION", ins, [att_out], attrs, mm2,
                     onnx_nodes(*sc.layers, sm, *after, mm2))
    new.append(node)
    if att_out != out:
        new.append(new_layer("RESHAPE", [att_out], [out],
                             {"shape": list(g.tensors[out].shape), "view": True}, mm2, []))
    i = next(j for j, n in enumerate(g.nodes) if n is mm2)
    g.nodes[i:i] = new
    g.nodes = [n for n in g.nodes if n is not mm2]
    return node


__all__ = ["Operand", "fuse_attention"]
