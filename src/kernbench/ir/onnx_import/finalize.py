"""Last import step: dead-layer removal, topological order, deterministic ids, producer /
consumer links, tensor roles and layouts, per-layer `shape` dicts."""

from __future__ import annotations

import heapq

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.ops import node_attrs

VIEW_OPS = ("RESHAPE", "TRANSPOSE")


def dead_code(g: Graph) -> None:
    live = set(g.outputs)
    keep: list[LayerIR] = []
    for n in reversed(g.nodes):
        if any(o and o in live for o in n.outputs):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    keep.reverse()
    g.nodes = keep
    used = set(g.inputs) | set(g.outputs)
    for n in g.nodes:
        used.update(i for i in n.inputs if i)
        used.update(o for o in n.outputs if o)
    for tid in list(used):
        t = g.tensors.get(tid)
        if t is not None and t.quant is not None:
            used.add(t.quant.scale)
            if t.quant.zero_point:
                used.add(t.quant.zero_point)
    for tid in [t for t in g.tensors if t not in used]:
        del g.tensors[tid]
    for tid in [t for t in g.weights if t not in used]:
        del g.weights[tid]


def topo_sort(g: Graph) -> None:
    """Stable topological order (ties keep the current order)."""
    producer = {}
    for i, n in enumerate(g.nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
    deps = [set() for _ in g.nodes]
    users: list[list[int]] = [[] for _ in g.nodes]
    for i, n in enumerate(g.nodes):
        for t in n.inputs:
            j = producer.get(t)
            if j is not None and j != i and j not in deps[i]:
                deps[i].add(j)
                users[j].append(i)
    indeg = [len(d) for d in deps]
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, u)
    if len(order) != len(g.nodes):  # a cycle: leave as is, the verifier reports it
        return
    g.nodes = [g.nodes[i] for i in order]


def assign_ids(g: Graph) -> None:
    for i, n in enumerate(g.nodes):
        n.id = f"{n.op_type.lower()}_{i}"


def set_roles_and_layouts(g: Graph) -> None:
    for t in g.tensors.values():
        if t.const:
            t.role = "weight"
        else:
            t.role = "activation"
        t.layout = None
    for n in g.nodes:
        if n.op_type in VIEW_OPS and node_attrs(n).view:
            for o in n.outputs:
                g.tensors[o].role = "intermediate"
    for n in g.nodes:
        if n.op_type == "KV_UPDATE":
            for tid in (n.inputs[0], n.outputs[0]):
                g.tensors[tid].role = "kv"
                g.tensors[tid].layout = "BHSD"
        elif n.op_type == "ATTENTION":
            for tid in n.inputs[:3] + n.outputs[:1]:
                if g.tensors[tid].layout is None:
                    g.tensors[tid].layout = "BHSD"
        elif n.op_type == "GEMM":
            g.tensors[n.inputs[1]].layout = "KN"
        elif n.op_type == "QKV_PROJ":
            for tid in n.inputs[1:4]:
                g.tensors[tid].layout = "KN"
            for tid in n.outputs:
                g.tensors[tid].layout = "BSHD" if len(g.tensors[tid].shape) == 4 else "BTH"
        elif n.op_type == "CONV":
            g.tensors[n.inputs[1]].layout = "OIHW" if len(g.tensors[n.inputs[1]].shape) == 4 \
                else None  # fmt: skip
            if len(g.tensors[n.inputs[0]].shape) == 4:
                g.tensors[n.inputs[0]].layout = "NCHW"
                g.tensors[n.outputs[0]].layout = "NCHW"


def layer_shapes(g: Graph) -> None:
    for n in g.nodes:
        ts = g.tensors
        if n.op_type == "GEMM":
            x, w = ts[n.inputs[0]].shape, ts[n.inputs[1]].shape
            m = 1
            for d in x[:-1]:
                m *= d
            n.shape = {"M": m, "N": w[1], "K": w[0]}
        elif n.op_type == "QKV_PROJ":
            x = ts[n.inputs[0]].shape
            m = 1
            for d in x[:-1]:
                m *= d
            a = node_attrs(n)
            n.shape = {
                "batch": x[0] if len(x) == 3 else 1, "seq": x[-2] if len(x) >= 2 else 1,
                "heads": a.num_heads, "kv_heads": a.num_kv_heads, "dim": a.head_dim,
                "M": m, "K": x[-1],
            }  # fmt: skip
        elif n.op_type == "ATTENTION":
            q, k = ts[n.inputs[0]].shape, ts[n.inputs[1]].shape
            n.shape = {"batch": q[0], "heads": q[1], "kv_heads": k[1], "seq_q": q[2],
                       "seq_kv": k[2], "dim": q[3]}  # fmt: skip
        elif n.op_type == "KV_UPDATE":
            new, out = ts[n.inputs[1]].shape, ts[n.outputs[0]].shape
            n.shape = {"batch": new[0], "heads": new[1], "seq_new": new[2], "seq_total": out[2],
                       "dim": new[3]}  # fmt: skip
        elif n.op_type == "CONV":
            x, w = ts[n.inputs[0]].shape, ts[n.inputs[1]].shape
            n.shape = {"N": x[0], "C": x[1], "O": w[0]}
        elif n.op_type in ("LAYER_NORM", "RMS_NORM", "SOFTMAX"):
            s = ts[n.outputs[0]].shape
            ax = node_attrs(n).axis
            rows = 1
            for d in s[:ax]:
                rows *= d
            cols = 1
            for d in s[ax:]:
                cols *= d
            n.shape = {"rows": rows, "cols": cols}
        else:
            n.shape = {}


def finalize(g: Graph) -> None:
    dead_code(g)
    topo_sort(g)
    assign_ids(g)
    g.rebuild_links()
    set_roles_and_layouts(g)
    layer_shapes(g)
