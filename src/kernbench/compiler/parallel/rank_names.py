"""Rank-unique names for a rank's graph (docs/multichip.md): every node and tensor but the graph
inputs takes the suffix `@ep<r>`, so that the ranks' graphs can sit side by side in one
ir.json and one memory map — the bundle a multi-chip `--verify` runs, whose whole-layer
ops (TOPK, MOE_ROUTE) on chip r find rank r's layer and tensors there."""

from __future__ import annotations

from kernbench.compiler.parallel.ep_graph import EpGraph, EpSite
from kernbench.ir.model import Graph


def suffix(rank: int) -> str:
    return f"@ep{rank}"


def rename_rank(eg: EpGraph, rank: int) -> EpGraph:
    """`eg` with rank-unique names (module docstring); the graph is renamed in place."""
    g: Graph = eg.graph
    sfx = suffix(rank)
    keep = set(g.inputs)

    def m(tid: str) -> str:
        return tid if not tid or tid in keep else tid + sfx

    tensors = {}
    for tid, t in g.tensors.items():
        t.id = m(tid)
        if t.quant is not None:
            t.quant.scale = m(t.quant.scale)
            if t.quant.zero_point:
                t.quant.zero_point = m(t.quant.zero_point)
        tensors[t.id] = t
    g.tensors = tensors
    g.weights = {m(k): v for k, v in g.weights.items()}
    for node in g.nodes:
        node.id += sfx
        node.inputs = [m(x) for x in node.inputs]
        node.outputs = [m(x) for x in node.outputs]
    g.outputs = [m(x) for x in g.outputs]
    if "collective_buffers" in g.metadata:
        g.metadata["collective_buffers"] = [m(x) for x in g.metadata["collective_buffers"]]
    if g.metadata.get("tied_weights"):
        g.metadata["tied_weights"] = {m(k): m(v) for k, v in g.metadata["tied_weights"].items()}
    g.rebuild_links()
    sites = [EpSite(s.node + sfx, s.op, m(s.src), m(s.dst), s.splits, s.row) for s in eg.sites]
    return EpGraph(g, sites)
