"""Expert parallelism on the IR: the MoE layers of one rank of `n` (docs/multichip.md).

Routed expert e lives on rank ⌊e / (E / n)⌋ (contiguous blocks). An MoE layer is a
`MoeBlock`: the token rows `x` [T, d], the router's top-k indices `idx` and weights `w`
[T, k], the experts' weights, and the tensor `out` [T, d] the weighted sum of the chosen
experts' outputs goes to. `ep_block` replaces the block's nodes on rank r by:

    own      (slice mode) GATHER of the rank's T / n token rows of x, idx and w
    route    MOE_ROUTE(idx) with the rank's counts → rows_e, pos_j
    send     GATHER x rows_e per chosen expert, CONCAT in expert order → [Σ_e c_re, d]:
             grouped by the expert's owner rank, as the all-to-all sends it
    dispatch all-to-all-v: rank s's block for rank q is its rows for q's experts; the
             receive buffer holds the blocks of s = 0, 1, … (each in expert order)
    experts  for every own expert with rows: SPLIT the receive buffer into its (source,
             expert) segments, CONCAT the expert's segments, gate / up GEMMs, SiLU, MUL,
             down GEMM (M = the rows every rank sent it)
    back     SPLIT each expert's output by source, CONCAT by (source, expert)
    combine  all-to-all-v back: rank r receives its pairs in expert order, which is the
             stacked order MOE_ROUTE's pos_j index
    sum      per slot j: GATHER by pos_j, MUL by w[:, j], ADD
    gather   (slice mode) all-gather of the ranks' [T / n, d] outputs into `out`

A collective is a placeholder node (GATHER of its input by a constant index, so the
compiler plans both buffers and the dependencies around it) that the multi-chip program
replaces (`compiler.parallel.ep_program`). In slice mode (a graph whose tokens are all on
every chip: an ONNX model checked with --verify) every rank computes the router on every
token and the MoE on its own; otherwise (a shape-only model built at batch / n) the
block's tokens are the rank's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR, is_shape_only, shape_only_array
from kernbench.ir.ops import node_attrs

EXPERT_PARTS = ("gate", "up", "down")


@dataclass
class MoeBlock:
    """One MoE layer of a graph (module docstring). `weight(e, part)` names are
    `<prefix>experts.<e>.<part>.weight`, constants of the graph; `removed` are the node
    ids the rank's nodes replace, `at` the graph position they go to."""

    prefix: str
    x: str
    idx: str
    w: str
    out: str
    n_experts: int
    top_k: int
    removed: set[str]
    at: int
    meta: dict = field(default_factory=dict)

    def weight(self, e: int, part: str) -> str:
        return f"{self.prefix}experts.{e}.{part}.weight"


@dataclass(frozen=True)
class EpSite:
    """A collective placeholder: `op` ("all_to_all_v" or "all_gather") from `src` into
    `dst`; `splits[s][q]` rows rank s sends rank q (all_gather: every rank's rows to
    every rank), `row` elements per row."""

    node: str
    op: str
    src: str
    dst: str
    splits: tuple[tuple[int, ...], ...]
    row: int


@dataclass
class EpGraph:
    """One rank's graph and its collective sites in graph order."""

    graph: Graph
    sites: list[EpSite] = field(default_factory=list)


def owner(e: int, n_experts: int, n: int) -> int:
    """The rank expert e lives on."""
    return e // (n_experts // n)


def find_blocks(g: Graph) -> list[MoeBlock]:
    """The MoE layers of a graph built by `models.llm_moe` (MOE_ROUTE form)."""
    out = []
    pos = {n.id: i for i, n in enumerate(g.nodes)}
    for node in g.nodes:
        if node.op_type != "MOE_ROUTE":
            continue
        p = node.id.removesuffix("moe.route")
        k = len(node.outputs) - sum(1 for c in node_attrs(node).counts if c)
        heads = (f"{p}moe.dispatch.", f"{p}moe.w.", f"{p}moe.combine.", f"{p}moe.weigh.",
                 f"{p}moe.acc.")
        whole = {f"{p}moe.route", f"{p}moe.concat"}
        removed = {n.id for n in g.nodes if n.id in whole or n.id.startswith(heads) or (
            n.id.startswith(f"{p}experts.") and not n.id.startswith(f"{p}experts.shared"))}
        last = f"{p}moe.acc.{k - 1}" if k > 1 else f"{p}moe.weigh.0"
        x = g.node(f"{p}moe.dispatch.{_first_active(node)}").inputs[0]
        out.append(MoeBlock(p, x, node.inputs[0], g.node(f"{p}moe.w.t").inputs[0],
                            g.node(last).outputs[0], int(node_attrs(node).n_experts), k,
                            removed, min(pos[i] for i in removed), dict(node.metadata)))
    return out


def _first_active(route: LayerIR) -> int:
    return next(e for e, c in enumerate(node_attrs(route).counts) if c)


def check_ep(n_experts: int, n: int) -> None:
    """`n` must divide the routed experts (one line naming the value, exit 2)."""
    if n_experts % n:
        raise InputError(f"--ep {n}: {n_experts} experts do not split into {n} equal "
                         "blocks (one per chip)", field="--ep")


class _Rank:
    """Builds one block's nodes for rank r (module docstring)."""

    def __init__(self, g: Graph, b: MoeBlock, r: int, n: int, counts: list[list[int]],
                 slice_tokens: bool, sites: list[EpSite]) -> None:
        self.g, self.b, self.r, self.n = g, b, r, n
        self.counts = counts           # [rank][expert]: the pairs rank s routes to e
        self.slice = slice_tokens
        self.sites = sites
        self.nodes: list[LayerIR] = []
        self.d = g.tensors[b.x].shape[-1]
        self.dtype = g.tensors[b.x].dtype
        self.per = b.n_experts // n
        self.mine = range(r * self.per, (r + 1) * self.per)
        self.shape_only = is_shape_only(g)

    # -- small builders -----------------------------------------------------------
    def tensor(self, tid: str, shape: list[int], dtype: str | None = None) -> str:
        self.g.tensors[tid] = TensorIR(id=tid, shape=list(shape), dtype=dtype or self.dtype)
        return tid

    def node(self, nid: str, op: str, ins: list[str], outs: list[str], **attrs) -> None:
        shape = attrs.pop("_shape", {})
        self.nodes.append(LayerIR(id=nid, op_type=op, inputs=ins, outputs=outs,
                                  attributes=attrs, shape=shape, metadata=dict(self.b.meta)))

    def const_index(self, tid: str, values: np.ndarray) -> str:
        self.g.tensors[tid] = TensorIR(id=tid, shape=[int(values.size)], dtype="int64",
                                       const=True)
        self.g.weights[tid] = (shape_only_array([values.size], np.int64) if self.shape_only
                               else values.astype(np.int64))
        return tid

    def rows(self, name: str, src: str, idx: np.ndarray) -> str:
        """GATHER of `src`'s rows `idx` (a constant index)."""
        t = self.g.tensors[src]
        out = self.tensor(f"{name}.y", [int(idx.size), *t.shape[1:]], t.dtype)
        self.node(name, "GATHER", [src, self.const_index(f"{name}.idx", idx)], [out], axis=0)
        return out

    def concat(self, name: str, parts: list[str], rows: int) -> str:
        if len(parts) == 1:
            return parts[0]
        out = self.tensor(f"{name}.y", [rows, self.d])
        self.node(name, "CONCAT", parts, [out], axis=0)
        return out

    def split(self, name: str, src: str, sizes: list[int]) -> list[str]:
        if len(sizes) == 1:
            return [src]
        outs = [self.tensor(f"{name}.{i}", [s, self.d]) for i, s in enumerate(sizes)]
        self.node(name, "SPLIT", [src], outs, axis=0, sizes=list(sizes))
        return outs

    def site(self, name: str, op: str, src: str, dst: str, splits: list[list[int]]) -> None:
        s_rows = self.g.tensors[src].shape[0]
        d_rows = self.g.tensors[dst].shape[0]
        idx = np.arange(d_rows, dtype=np.int64) % max(1, s_rows)
        self.node(name, "GATHER", [src, self.const_index(f"{name}.idx", idx)], [dst], axis=0)
        self.sites.append(EpSite(name, op, src, dst, tuple(tuple(r) for r in splits), self.d))

    def gemm(self, name: str, x: str, w: str) -> str:
        m = self.g.tensors[x].shape[0]
        kk, nn = self.g.tensors[w].shape
        y = self.tensor(f"{name}.y", [m, nn])
        self.node(name, "GEMM", [x, w], [y], _shape={"M": m, "N": nn, "K": kk})
        return y

    # -- the block ------------------------------------------------------------------
    def build(self) -> None:
        b, p, n, r = self.b, self.b.prefix, self.n, self.r
        x, idx, w = b.x, b.idx, b.w
        t_all = self.g.tensors[x].shape[0]
        t = t_all // n if self.slice else t_all
        if self.slice:
            own = np.arange(r * t, (r + 1) * t, dtype=np.int64)
            x = self.rows(f"{p}moe.own.x", x, own)
            idx = self.rows(f"{p}moe.own.idx", idx, own)
            w = self.rows(f"{p}moe.own.w", w, own)
        k, e_n = b.top_k, b.n_experts
        mine_c = self.counts[r]
        active = [e for e in range(e_n) if mine_c[e]]
        outs = [self.tensor(f"{p}moe.rows.{e}", [mine_c[e]], "int64") for e in active]
        pos = [self.tensor(f"{p}moe.pos.{j}", [t], "int64") for j in range(k)]
        self.node(f"{p}moe.route", "MOE_ROUTE", [idx], outs + pos, n_experts=e_n,
                  counts=list(mine_c))
        parts = []
        for e, rows in zip(active, outs, strict=True):
            y = self.tensor(f"{p}moe.dispatch.{e}.y", [mine_c[e], self.d])
            self.node(f"{p}moe.dispatch.{e}", "GATHER", [x, rows], [y], axis=0)
            parts.append(y)
        send = self.concat(f"{p}moe.send", parts, t * k) if len(parts) > 1 else \
            self.rows(f"{p}moe.send", parts[0], np.arange(t * k, dtype=np.int64))
        to = [[sum(self.counts[s][e] for e in range(q * self.per, (q + 1) * self.per))
               for q in range(n)] for s in range(n)]
        got = sum(to[s][r] for s in range(n))
        recv = self.tensor(f"{p}moe.recv", [max(1, got), self.d])
        self.site(f"{p}moe.dispatch_a2a", "all_to_all_v", send, recv, to)
        segs = [(s, e, self.counts[s][e]) for s in range(n) for e in self.mine
                if self.counts[s][e]]
        pieces = dict(zip([(s, e) for s, e, _ in segs],
                          self.split(f"{p}moe.recv.split", recv, [c for *_, c in segs])
                          if segs else [], strict=True))
        back: dict[tuple[int, int], str] = {}
        for e in self.mine:
            srcs = [(s, c) for s, ee, c in segs if ee == e]
            if not srcs:
                continue
            m = sum(c for _, c in srcs)
            xe = self.concat(f"{p}experts.{e}.in", [pieces[(s, e)] for s, _ in srcs], m)
            ye = self.expert(e, xe)
            for (s, _), y in zip(srcs, self.split(f"{p}experts.{e}.out.split", ye,
                                                  [c for _, c in srcs]), strict=True):
                back[(s, e)] = y
        order = [back[(s, e)] for s, e, _ in segs]
        if order:
            ret = self.concat(f"{p}moe.back", order, got) if len(order) > 1 else \
                self.rows(f"{p}moe.back", order[0], np.arange(got, dtype=np.int64))
        else:  # nothing routed to this rank's experts: an empty block stands in
            ret = self.rows(f"{p}moe.back", x, np.zeros(1, dtype=np.int64))
        ys = self.tensor(f"{p}moe.stacked", [t * k, self.d])
        self.site(f"{p}moe.combine_a2a", "all_to_all_v", ret, ys,
                  [[to[q][s] for q in range(n)] for s in range(n)])
        y = self.weighted_sum(ys, pos, w, t)
        if self.slice:
            self.site(f"{p}moe.gather", "all_gather", y, b.out,
                      [[t] * n for _ in range(n)])
        else:
            self.rename(y, b.out)

    def expert(self, e: int, xe: str) -> str:
        b, p = self.b, self.b.prefix
        q = f"{p}experts.{e}."
        g = self.gemm(f"{q}gate", xe, b.weight(e, "gate"))
        a = self.tensor(f"{q}act.y", self.g.tensors[g].shape)
        self.node(f"{q}act", "SILU", [g], [a])
        u = self.gemm(f"{q}up", xe, b.weight(e, "up"))
        h = self.tensor(f"{q}glu.y", self.g.tensors[g].shape)
        self.node(f"{q}glu", "MUL", [a, u], [h])
        return self.gemm(f"{q}down", h, b.weight(e, "down"))

    def weighted_sum(self, ys: str, pos: list[str], w: str, t: int) -> str:
        p, k = self.b.prefix, self.b.top_k
        wt = self.tensor(f"{p}moe.w.t.y", [k, t], self.g.tensors[w].dtype)
        self.node(f"{p}moe.w.t", "TRANSPOSE", [w], [wt], perm=[1, 0], view=False)
        cols = [wt]
        if k > 1:
            cols = [self.tensor(f"{p}moe.w.{j}", [1, t], self.g.tensors[w].dtype)
                    for j in range(k)]
            self.node(f"{p}moe.w.split", "SPLIT", [wt], cols, axis=0, sizes=[1] * k)
        acc = None
        for j in range(k):
            wj = self.tensor(f"{p}moe.w.{j}.col.y", [t, 1], self.g.tensors[w].dtype)
            self.node(f"{p}moe.w.{j}.col", "RESHAPE", [cols[j]], [wj], shape=[t, 1], view=True)
            g = self.tensor(f"{p}moe.combine.{j}.y", [t, self.d])
            self.node(f"{p}moe.combine.{j}", "GATHER", [ys, pos[j]], [g], axis=0)
            m = self.tensor(f"{p}moe.weigh.{j}.y", [t, self.d])
            self.node(f"{p}moe.weigh.{j}", "MUL", [g, wj], [m])
            if acc is None:
                acc = m
            else:
                a = self.tensor(f"{p}moe.acc.{j}.y", [t, self.d])
                self.node(f"{p}moe.acc.{j}", "ADD", [acc, m], [a])
                acc = a
        assert acc is not None
        return acc

    def rename(self, tid: str, to: str) -> None:
        """The last node writes the block's output tensor itself."""
        if tid == to:
            return
        last = self.nodes[-1]
        assert last.outputs == [tid]
        last.outputs = [to]
        del self.g.tensors[tid]


def ep_graph(graph: Graph, blocks_of: list[MoeBlock], n: int, rank: int,
             counts: list[list[list[int]]], *, slice_tokens: bool = False) -> EpGraph:
    """The graph rank `rank` of `n` runs: every block of `blocks_of` (found in `graph`)
    rebuilt for the rank (module docstring), with `counts[block][s][e]` the pairs rank s
    routes to expert e in that block. The other ranks' experts' weights are dropped.
    `graph` itself is modified: pass a copy."""
    g = graph
    sites: list[EpSite] = []
    new_nodes: dict[int, list[LayerIR]] = {}
    removed: set[str] = set()
    for b, c in zip(blocks_of, counts, strict=True):
        rk = _Rank(g, b, rank, n, c, slice_tokens, sites)
        rk.build()
        new_nodes[b.at] = rk.nodes
        removed |= b.removed
        per = b.n_experts // n
        for e in range(b.n_experts):
            if rank * per <= e < (rank + 1) * per:
                continue
            for part in EXPERT_PARTS:
                g.tensors.pop(b.weight(e, part), None)
                g.weights.pop(b.weight(e, part), None)
    nodes: list[LayerIR] = []
    for i, node in enumerate(g.nodes):
        nodes += new_nodes.get(i, [])
        if node.id not in removed:
            nodes.append(node)
    g.nodes = nodes
    used = {x for node in nodes for x in [*node.inputs, *node.outputs]}
    for tid in [t for t in g.tensors if t not in used and t not in g.inputs
                and t not in g.outputs and not g.tensors[t].const]:
        del g.tensors[tid]
    g.rebuild_links()
    _idle_weights(g)
    keep = sorted({x for s in sites for x in (s.src, s.dst)})
    g.metadata["collective_buffers"] = keep
    _check_rows(g, sites)
    return EpGraph(g, sites)


def _idle_weights(g: Graph) -> None:
    """A shape-only model's `idle_weights` (experts no node reads): of the
    rank's own experts only."""
    for ly in ((g.metadata.get("llm") or {}).get("moe") or {}).get("layers", []):
        head = f"l{ly['layer']}.experts."
        ly["idle_weights"] = sorted(t for t, x in g.tensors.items() if t.startswith(head)
                                    and x.const and not x.consumers)


def _check_rows(g: Graph, sites: list[EpSite]) -> None:
    for s in sites:
        for tid in (s.src, s.dst):
            if math.prod(g.tensors[tid].shape[1:]) != s.row:
                raise ValueError(f"site '{s.node}': '{tid}' rows are not {s.row} elements")
