"""Pipeline parallelism on the IR: the graph one stage of `n` runs (docs/multichip.md).

A decoder is a prologue (embedding), L marked blocks (`LayerIR.metadata["block"]`) and an
epilogue (final norm, LM head). Stage s of n holds the contiguous blocks
s·L/n .. (s+1)·L/n − 1 (n must divide L); the prologue goes with stage 0, the epilogue
with stage n − 1. A prologue tensor a later stage's blocks read besides the residual
stream (a mask, RoPE tables, position ids) is computed again on that stage from the
graph's inputs and constants (its producers are copied), so only the blocks' own
activations cross a stage boundary.

The activations a stage reads from the previous one (the tensors its blocks read that
the previous stage's blocks produce; `boundary`) become graph inputs of the stage, each
followed by a receive site: an identity TRANSPOSE (`<tensor>@recv`), so the compiler plans
the received buffer and the dependencies after it like any layer's; the multi-chip
program (`compiler.parallel.pp_program`) replaces its entries by a send/recv from the
previous stage's chip. The sending stage lists the same tensors among its graph outputs.
Both buffers are kept whole (graph metadata `collective_buffers`). A tensor read by a
stage other than the next one is refused (one line naming it).

The stage's blocks are numbered 0.. again, so block replay (`host.block_replay`) reads a
stage like a model of L / n blocks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from kernbench.compiler.parallel.tp_graph import ParallelSite
from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR


@dataclass
class StageGraph:
    """One stage's graph; `recv` its receive sites (op "send_recv", in `boundary` order),
    `send` the tensors it sends to the next stage (in the next stage's `recv` order)."""

    graph: Graph
    stage: int
    stages: int
    blocks: tuple[int, int]  # the model's blocks [lo, hi) this stage runs
    recv: list[ParallelSite] = field(default_factory=list)
    send: list[str] = field(default_factory=list)


def _block(n: LayerIR) -> int | None:
    b = n.metadata.get("block")
    return b if isinstance(b, int) else None


def block_count(graph: Graph) -> int:
    """The number of marked blocks (0 when none are marked)."""
    bs = {b for n in graph.nodes if (b := _block(n)) is not None}
    return len(bs)


def check_stages(graph: Graph, n: int) -> int:
    """The blocks per stage; bad input (no marked blocks, n not dividing them): one line
    naming the value."""
    blocks = block_count(graph)
    if blocks == 0:
        raise InputError(f"--pp {n}: the model marks no decoder layers to split into "
                         "stages", field="--pp")
    if blocks % n:
        raise InputError(f"--pp {n}: {blocks} decoder layers do not split into {n} equal "
                         "stages", field="--pp")
    return blocks // n


def _stage_of(graph: Graph, n: int) -> dict[str, int]:
    """node id → stage."""
    per = check_stages(graph, n)
    idx = [i for i, node in enumerate(graph.nodes) if _block(node) is not None]
    first, last = idx[0], idx[-1]
    out: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        b = _block(node)
        if b is not None:
            out[node.id] = b // per
        elif i < first:
            out[node.id] = 0
        elif i > last:
            out[node.id] = n - 1
        else:
            raise InputError(f"--pp {n}: node '{node.id}' sits between decoder layers "
                             "but belongs to none", field="--pp")
    return out


def boundary(graph: Graph, n: int, s: int) -> list[str]:
    """The tensors stage s + 1 reads that stage s's blocks produce (sorted)."""
    stage = _stage_of(graph, n)
    t = graph.tensors
    out = set()
    for node in graph.nodes:
        if stage[node.id] != s + 1:
            continue
        for x in node.inputs:
            p = t[x].producer if x and x in t else None
            if p is not None and stage[p] == s and _block(graph.node(p)) is not None:
                out.add(x)
    return sorted(out)


def _recompute(graph: Graph, stage: dict[str, int], need: str, s: int,
               into: dict[str, LayerIR]) -> None:
    """Copy the prologue producers of `need` (and theirs) into stage s's nodes."""
    t = graph.tensors
    p = t[need].producer
    if p is None or p in into:
        return
    node = graph.node(p)
    if _block(node) is not None or stage[p] != 0:
        raise InputError(f"--pp {graph_stages(stage)}: stage {s} reads '{need}', made by "
                         f"'{p}' on stage {stage[p]} (only the previous stage's layer "
                         "outputs cross a stage boundary)", field="--pp")
    into[p] = node
    for x in node.inputs:
        if x and not t[x].const and x not in graph.inputs:
            _recompute(graph, stage, x, s, into)


def graph_stages(stage: dict[str, int]) -> int:
    return max(stage.values()) + 1


def stage_graph(graph: Graph, n: int, s: int) -> StageGraph:
    """The graph stage `s` of `n` runs (see the module docstring); `graph` is left as it
    is (nodes and tensors copied, weight arrays shared)."""
    stage = _stage_of(graph, n)
    per = check_stages(graph, n)
    t = graph.tensors
    lo = s * per
    recv = boundary(graph, n, s - 1) if s > 0 else []
    send = boundary(graph, n, s) if s < n - 1 else []
    own = [node for node in graph.nodes if stage[node.id] == s]
    made = {o for node in own for o in node.outputs}
    extra: dict[str, LayerIR] = {}
    for node in own:
        for x in node.inputs:
            if not x or x in made or x in recv or t[x].const or x in graph.inputs:
                continue
            _recompute(graph, stage, x, s, extra)
    nodes = [copy.deepcopy(nd) for nd in graph.nodes if nd.id in extra] + \
        [copy.deepcopy(nd) for nd in own]
    for node in nodes:
        b = _block(node)
        if b is not None:
            node.metadata["block"] = b - lo
    tensors = {}
    sites = []
    head = []
    for x in recv:
        got = f"{x}@recv"
        tensors[got] = t[x].model_copy(deep=True)
        tensors[got].id = got
        sid = f"pp.recv.{x}"
        head.append(LayerIR(id=sid, op_type="TRANSPOSE", inputs=[x], outputs=[got],
                            attributes={"perm": list(range(len(t[x].shape))), "view": False},
                            metadata={}))
        sites.append(ParallelSite(sid, "send_recv", x, got))
        for node in nodes:
            node.inputs = [got if i == x else i for i in node.inputs]
    nodes = head + nodes
    used = {i for nd in nodes for i in nd.inputs if i} | {o for nd in nodes for o in nd.outputs}
    for k in used:
        if k not in tensors:
            tensors[k] = t[k].model_copy(deep=True)
    made = {o for nd in nodes for o in nd.outputs}
    outputs = [o for o in graph.outputs if o in made] + [x for x in send if x not in
                                                          graph.outputs]
    meta = copy.deepcopy(graph.metadata)
    meta["collective_buffers"] = sorted(set(meta.get("collective_buffers", ()))
                                        | set(send) | {x.dst for x in sites})
    meta["pp"] = {"stage": s, "stages": n, "blocks": [lo, lo + per]}
    if "llm" in meta:
        meta["llm"]["blocks"] = per
    g = Graph(created_by=graph.created_by, nodes=nodes,
              inputs=[i for i in graph.inputs if i in used] + recv,
              outputs=outputs, metadata=meta, tensors=tensors, qconfig=graph.qconfig,
              weights={k: v for k, v in graph.weights.items() if k in used})
    g.rebuild_links()
    return StageGraph(g, s, n, (lo, lo + per), sites, send)
