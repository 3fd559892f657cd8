"""The Q, K and V projections feeding one ATTENTION -> QKV_PROJ.

Two shapes of the pattern:
- three GEMMs that read the same input (BERT, Llama: q_proj / k_proj / v_proj);
- one GEMM whose output is SPLIT in three along N (GPT-2 c_attn): the weight is cut into
  w_q / w_k / w_v so that QKV_PROJ always has the spec's inputs [x, w_q, w_k, w_v]
  (+ b_q, b_k, b_v).
The projections are found by walking back from the attention inputs through layout
layers, ROPE and KV_UPDATE (new-token input).
"""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    add_const,
    add_tensor,
    new_layer,
    onnx_nodes,
)
from kernbench.ir.onnx_import.initializers import remember_slice
from kernbench.ir.ops import node_attrs


def _trace(ix: Index, t: str):
    """(gemm, split, split_index, tensor at split input) reached from attention input t."""
    split, sidx = None, None
    for _ in range(16):
        p = ix.prod(t)
        if p is None:
            return None
        if p.op_type == "GEMM":
            return p, split, sidx
        if p.op_type in ("RESHAPE", "TRANSPOSE", "ROPE"):
            t = p.inputs[0]
        elif p.op_type == "KV_UPDATE":
            t = p.inputs[1]
        elif p.op_type == "SPLIT" and split is None:
            split, sidx = p, p.outputs.index(t)
            t = p.inputs[0]
        else:
            return None
    return None


def _bias(g: Graph, gemm: LayerIR) -> str | None:
    return gemm.inputs[2] if len(gemm.inputs) > 2 and gemm.inputs[2] else None


def fuse_qkv_proj(g: Graph) -> None:
    done: set[int] = set()
    changed = True
    while changed:
        changed = False
        ix = Index(g)
        for att in g.nodes:
            if att.op_type != "ATTENTION" or id(att) in done:
                continue
            done.add(id(att))
            tr = [_trace(ix, t) for t in att.inputs[:3]]
            if any(x is None for x in tr):
                continue
            gemms = [x[0] for x in tr]
            a = node_attrs(att)
            heads = {"num_heads": a.num_heads, "num_kv_heads": a.num_kv_heads,
                     "head_dim": a.head_dim}
            if len({id(x) for x in gemms}) == 3 and all(x[1] is None for x in tr):
                changed = _three(g, ix, gemms, heads)
            elif len({id(x) for x in gemms}) == 1 and all(x[1] is not None for x in tr):
                changed = _split(g, ix, gemms[0], tr, heads)
            if changed:
                break


def _three(g: Graph, ix: Index, gemms: list[LayerIR], heads: dict) -> bool:
    x = gemms[0].inputs[0]
    if any(m.inputs[0] != x for m in gemms):
        return False
    ws = [m.inputs[1] for m in gemms]
    if any(not g.tensors[w].const for w in ws):
        return False
    imp = [m.metadata.get("imported_qbits") for m in gemms]
    if any(i != imp[0] for i in imp):
        return False
    biases = [_bias(g, m) for m in gemms]
    ins = [x] + ws
    if any(biases):
        for m, b in zip(gemms, biases, strict=True):
            if b is None:
                n_ = g.tensors[m.inputs[1]].shape[1]
                b = add_const(g, f"{m.outputs[0]}.bias", np.zeros(n_, np.float32))
            ins.append(b)
    outs = [m.outputs[0] for m in gemms]
    first = min(gemms, key=lambda m: ix.pos[id(m)])
    node = new_layer("QKV_PROJ", ins, outs, dict(heads), first, onnx_nodes(*gemms))
    i = ix.pos[id(first)]
    g.nodes.insert(i, node)
    drop = {id(m) for m in gemms}
    g.nodes = [n for n in g.nodes if id(n) not in drop]
    return True


def _split(g: Graph, ix: Index, gemm: LayerIR, tr: list, heads: dict) -> bool:
    split = tr[0][1]
    if any(t[1] is not split for t in tr) or len(split.outputs) != 3:
        return False
    order = [t[2] for t in tr]
    if sorted(order) != [0, 1, 2]:
        return False
    w_id = gemm.inputs[1]
    wt = g.tensors[w_id]
    if not wt.const or wt.quant is not None and (wt.quant.axis is not None):
        return False
    # the path gemm output -> split input must keep the last axis (N) intact
    t = split.inputs[0]
    path = []
    while t != gemm.outputs[0]:
        p = ix.prod(t)
        if p is None or p.op_type != "RESHAPE" or not ix.single_use(p.outputs[0]):
            return False
        path.append(p)
        t = p.inputs[0]
    n_total = wt.shape[1]
    rank = len(g.tensors[split.inputs[0]].shape)
    if node_attrs(split).axis != rank - 1 or g.tensors[split.inputs[0]].shape[-1] != n_total:
        return False
    if not ix.single_use(gemm.outputs[0]):
        return False
    sizes = node_attrs(split).sizes
    offs = np.cumsum([0] + sizes)
    w = g.weights[w_id]
    b_id = _bias(g, gemm)
    x = gemm.inputs[0]
    lead = g.tensors[gemm.outputs[0]].shape[:-1]
    ws, bs, outs = [], [], []
    for j in order:  # j = split output used as q, k, v
        sl = slice(int(offs[j]), int(offs[j + 1]))
        wj = add_const(g, f"{w_id}[{j}]", w[:, sl])
        remember_slice(g.weights[wj], w, 1, sl.start, sl.stop)  # the bundle reads it back
        if wt.quant is not None:
            g.tensors[wj].quant = wt.quant.model_copy()
            g.tensors[wj].dtype = wt.dtype
        ws.append(wj)
        if b_id:
            bs.append(add_const(g, f"{b_id}[{j}]", g.weights[b_id][sl]))
            remember_slice(g.weights[bs[-1]], g.weights[b_id], 0, sl.start, sl.stop)
        outs.append(add_tensor(g, split.outputs[j], lead + [sizes[j]], g.tensors[x].dtype))
    node = new_layer("QKV_PROJ", [x] + ws + bs, outs, dict(heads), gemm,
                     onnx_nodes(gemm, split, *path))  # fmt: skip
    views = []
    for j, o in zip(order, outs, strict=True):
        want = g.tensors[split.outputs[j]].shape
        views.append(new_layer("RESHAPE", [o], [split.outputs[j]], {"shape": want, "view": True},
                               split))  # fmt: skip
    i = ix.pos[id(split)]
    g.nodes[i:i + 1] = [node] + views
    return True
