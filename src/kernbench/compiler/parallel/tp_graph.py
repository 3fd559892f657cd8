"""Tensor parallelism on the IR (Megatron-style): the graph one rank of `n` runs.

Attention heads and MLP columns are split over the ranks:

- a QKV_PROJ, and each GEMM that starts an MLP (its output reaches the MLP's last GEMM
  through activations, MULs and reshapes only), is *column-parallel*: rank r keeps the
  r-th block of its weight's (and bias's) columns, so its outputs hold heads / n or
  intermediate / n;
- the split axis is followed forward through reshapes, transposes, RoPE, per-head norms,
  element-wise ops, KV_UPDATE (the KV cache, graph input and output, is split by head)
  and ATTENTION (num_heads / num_kv_heads divided);
- the GEMM that reads a split tensor on its reduction axis is *row-parallel*: rank r keeps
  the r-th block of its weight's rows, and its output is a partial sum (its bias, if any,
  is kept by rank 0 and zero elsewhere). A `ParallelSite` node (an identity TRANSPOSE, so
  the compiler plans its input and output buffers and the dependencies around it) follows
  it; the multi-chip program replaces that node's entries by a ring all-reduce
  (`compiler.parallel.tp_program`);
- the LM head (the GEMM producing the first graph output) is *vocab-parallel* when the
  vocabulary divides: rank r computes its block of the logits, a CONCAT of n copies
  stands for the all-gather into [n, rows, vocab / n], and a TRANSPOSE and a view restore
  the logits' shape.

Anything else a split tensor reaches is refused (one line naming the node), as is a head,
KV-head or intermediate count that `n` does not divide.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR, is_shape_only_array, shape_only_array
from kernbench.ir.ops import node_attrs

#: ops a split tensor passes through unchanged (the split axis stays where it is)
ELEMENTWISE = {"SILU", "GELU", "RELU", "ELEMENTWISE", "SIGMOID", "TANH", "QUICK_GELU", "MUL",
               "ADD", "SUB", "DIV", "CLAMP"}
#: ops between an MLP's first GEMMs and its last one
MLP_PATH = {"RESHAPE", "SILU", "GELU", "RELU", "ELEMENTWISE", "SIGMOID", "QUICK_GELU", "MUL"}


@dataclass(frozen=True)
class ParallelSite:
    """A node of the rank graph that stands for a collective: `op` ("all_reduce" or
    "all_gather") over the node's input (`src`) into its output (`dst`)."""

    node: str
    op: str
    src: str
    dst: str


@dataclass
class TpGraph:
    """One rank's graph and its collective sites, in graph order; `split_inputs` are the
    graph inputs split by head (the KV cache), with their split axis."""

    graph: Graph
    sites: list[ParallelSite] = field(default_factory=list)
    split_inputs: dict[str, int] = field(default_factory=dict)


def _columns(w: np.ndarray, n: int, r: int, axis: int = -1) -> np.ndarray:
    """Block r of n along `axis` (a shape-only stand-in stays a stand-in)."""
    shape = list(w.shape)
    ax = axis % len(shape)
    shape[ax] //= n
    if is_shape_only_array(w) or (w.ndim and not any(w.strides) and w.size > 1):
        return shape_only_array(shape, w.dtype)
    k = w.shape[ax] // n
    return np.ascontiguousarray(np.take(w, range(r * k, (r + 1) * k), axis=ax))


class _Sharder:
    def __init__(self, g: Graph, n: int, rank: int) -> None:
        self.g, self.n, self.r = g, n, rank
        self.split: dict[str, int] = {}   # tensor → split axis (shapes already divided)
        self.out = TpGraph(g)
        self.nodes: list[LayerIR] = []

    # -- checks ---------------------------------------------------------------------
    def need(self, value: int, what: str, node: LayerIR) -> None:
        if value % self.n:
            raise InputError(f"--tp {self.n}: {what} {value} does not split into {self.n} "
                             f"(node '{node.id}')", field="--tp")

    # -- tensors and weights --------------------------------------------------------
    def weight(self, tid: str, axis: int, node: LayerIR) -> None:
        t = self.g.tensors[tid]
        if not t.const:
            raise InputError(f"--tp {self.n}: node '{node.id}' has a computed weight "
                             f"'{tid}'; only constant weights split", field="--tp")
        self.need(t.shape[axis], f"dimension {axis % len(t.shape)} of weight '{tid}'", node)
        nid = f"{tid}@tp{self.r}"
        w = self.g.weights.get(tid)
        t2 = t.model_copy(deep=True)
        t2.id = nid
        t2.shape = list(t.shape)
        t2.shape[axis] //= self.n
        self.g.tensors[nid] = t2
        if w is not None:
            self.g.weights[nid] = _columns(np.asarray(w), self.n, self.r, axis)
        node.inputs = [nid if x == tid else x for x in node.inputs]

    def zero_bias(self, tid: str, node: LayerIR) -> None:
        """A row-parallel GEMM's bias: added once, by rank 0."""
        if self.r == 0:
            return
        t = self.g.tensors[tid]
        nid = f"{tid}@tp{self.r}"
        t2 = t.model_copy(deep=True)
        t2.id = nid
        self.g.tensors[nid] = t2
        w = self.g.weights.get(tid)
        if w is not None:
            self.g.weights[nid] = (shape_only_array(t.shape, np.asarray(w).dtype)
                                   if is_shape_only_array(w)
                                   else np.zeros_like(np.asarray(w)))
        node.inputs = [nid if x == tid else x for x in node.inputs]

    def split_out(self, tid: str, axis: int, node: LayerIR) -> None:
        t = self.g.tensors[tid]
        ax = axis % len(t.shape)
        self.need(t.shape[ax], f"dimension {ax} of '{tid}'", node)
        t.shape = list(t.shape)
        t.shape[ax] //= self.n
        self.split[tid] = ax

    # -- the walk -------------------------------------------------------------------
    def run(self) -> TpGraph:
        g = self.g
        column = self.column_gemms()
        head = self.lm_head()
        for node in list(g.nodes):
            self.nodes.append(node)
            ins = [(i, x) for i, x in enumerate(node.inputs) if x and x in self.split]
            if node.op_type == "QKV_PROJ":
                self.qkv(node)
            elif node.id in column:
                self.column(node)
            elif node.id == head:
                self.vocab(node)
            elif ins:
                self.through(node, ins)
            else:
                self.check_inputs_unsplit(node)
        g.nodes = self.nodes
        g.rebuild_links()
        return self.out

    def check_inputs_unsplit(self, node: LayerIR) -> None:
        if node.op_type == "KV_UPDATE":
            raise InputError(f"--tp {self.n}: KV_UPDATE '{node.id}' writes keys or values "
                             "no split projection produced", field="--tp")

    def qkv(self, node: LayerIR) -> None:
        a = node_attrs(node)
        self.need(int(a.num_heads), "attention heads", node)
        self.need(int(a.num_heads if a.num_kv_heads is None else a.num_kv_heads), "KV heads",
                  node)
        for w in node.inputs[1:]:
            if w:
                self.weight(w, -1, node)
        for o in node.outputs:
            self.split_out(o, -1, node)
        self.heads(node)

    def heads(self, node: LayerIR) -> None:
        for obj in (node.attributes, node.shape):
            for k in ("num_heads", "num_kv_heads", "heads", "kv_heads"):
                if k in obj:
                    obj[k] = int(obj[k]) // self.n

    def column(self, node: LayerIR) -> None:
        w = node.inputs[1]
        self.need(self.g.tensors[w].shape[-1], "intermediate size", node)
        self.weight(w, -1, node)
        if len(node.inputs) > 2 and node.inputs[2]:
            self.weight(node.inputs[2], -1, node)
        self.split_out(node.outputs[0], -1, node)
        self.gemm_shape(node)

    def gemm_shape(self, node: LayerIR) -> None:
        x, w = (self.g.tensors[t] for t in node.inputs[:2])
        if {"M", "N", "K"} <= set(node.shape):
            node.shape.update(M=math.prod(x.shape[:-1]), K=w.shape[0], N=w.shape[-1])

    def through(self, node: LayerIR, ins: list[tuple[int, str]]) -> None:
        g = self.g
        op = node.op_type
        first_i, first = ins[0]
        ax = self.split[first]
        if op == "GEMM" and first_i == 0 and ax == len(g.tensors[first].shape) - 1:
            self.row(node)
            return
        if op == "RESHAPE":
            self.reshape(node, ax)
        elif op == "TRANSPOSE":
            perm = [int(p) for p in node_attrs(node).perm]
            self.split_out(node.outputs[0], perm.index(ax), node)
        elif op in ("RMS_NORM", "LAYER_NORM"):
            norm_ax = int(node_attrs(node).axis) % len(g.tensors[first].shape)
            if first_i != 0 or norm_ax == ax:
                self.refuse(node, first)
            self.split_out(node.outputs[0], ax, node)
        elif op == "ROPE":
            if first_i != 0:
                self.refuse(node, first)
            self.split_out(node.outputs[0], ax, node)
        elif op in ELEMENTWISE:
            self.elementwise(node, ax)
        elif op == "KV_UPDATE":
            self.kv_update(node, ax)
        elif op == "ATTENTION":
            self.attention(node)
        else:
            self.refuse(node, first)

    def refuse(self, node: LayerIR, tid: str) -> None:
        raise InputError(f"--tp {self.n}: node '{node.id}' ({node.op_type}) reads "
                         f"'{tid}', which is split by head or column; it has no "
                         "tensor-parallel form", field="--tp")

    def reshape(self, node: LayerIR, ax: int) -> None:
        """The split axis of a view: the output axis that starts at the same element
        stride (the product of the axes before it) and has room for the split."""
        g = self.g
        src = g.tensors[node.inputs[0]]
        full = list(src.shape)
        full[ax] *= self.n
        before = math.prod(full[:ax])
        shape = list(node_attrs(node).shape or g.tensors[node.outputs[0]].shape)
        for i in range(len(shape)):
            if math.prod(shape[:i]) == before and shape[i] % self.n == 0 and shape[i] > 1:
                out = g.tensors[node.outputs[0]]
                self.split_out(out.id, i, node)
                if "shape" in node.attributes:
                    node.attributes["shape"] = list(out.shape)
                return
        self.refuse(node, node.inputs[0])

    def elementwise(self, node: LayerIR, ax: int) -> None:
        g = self.g
        for x in node.inputs:
            if not x or x in self.split:
                continue
            t = g.tensors[x]
            k = ax - (len(g.tensors[node.outputs[0]].shape) - len(t.shape))
            if k >= 0 and t.shape[k] != 1:
                self.refuse(node, x)
        self.split_out(node.outputs[0], ax, node)

    def kv_update(self, node: LayerIR, ax: int) -> None:
        g = self.g
        past, new = node.inputs[0], node.inputs[1]
        if past not in self.split:
            if past not in g.inputs:
                self.refuse(node, past)
            self.split_out(past, ax, node)
            self.out.split_inputs[past] = ax
        if new not in self.split:
            self.refuse(node, new)
        self.split_out(node.outputs[0], ax, node)
        self.heads(node)

    def attention(self, node: LayerIR) -> None:
        for x in node.inputs[:3]:
            if x not in self.split or self.split[x] != 1:
                self.refuse(node, x)
        for x in node.inputs[3:]:
            if x and x in self.split:
                self.refuse(node, x)
        self.heads(node)
        self.split_out(node.outputs[0], 1, node)

    def row(self, node: LayerIR) -> None:
        """A row-parallel GEMM: weight rows split, output a partial sum, then the site."""
        self.weight(node.inputs[1], 0, node)
        if len(node.inputs) > 2 and node.inputs[2]:
            self.zero_bias(node.inputs[2], node)
        self.gemm_shape(node)
        self.site(node, node.outputs[0])

    def site(self, node: LayerIR, y: str) -> None:
        """Insert the node standing for an all-reduce after `node`'s output `y`: its
        consumers (and the graph outputs) read the new tensor."""
        g = self.g
        t = g.tensors[y]
        part = f"{y}@partial"
        pt = t.model_copy(deep=True)
        pt.id = part
        g.tensors[part] = pt
        node.outputs = [part if o == y else o for o in node.outputs]
        sid = f"{node.id}.allreduce"
        self.nodes.append(LayerIR(id=sid, op_type="TRANSPOSE", inputs=[part], outputs=[y],
                                  attributes={"perm": list(range(len(t.shape))),
                                              "view": False},
                                  metadata=_site_meta(node)))
        self.out.sites.append(ParallelSite(sid, "all_reduce", part, y))

    def lm_head(self) -> str | None:
        """The GEMM whose output is the first graph output, when its columns split."""
        g = self.g
        if not g.outputs:
            return None
        t = g.tensors[g.outputs[0]]
        node = g.node(t.producer) if t.producer else None
        # an output through a view: the GEMM behind it
        while node is not None and node.op_type == "RESHAPE" and node_attrs(node).view:
            src = g.tensors[node.inputs[0]]
            node = g.node(src.producer) if src.producer else None
        if node is None or node.op_type != "GEMM" or len(node.inputs) < 2:
            return None
        w = g.tensors[node.inputs[1]]
        if not w.const or len(w.shape) != 2 or w.shape[-1] % self.n:
            return None
        return node.id

    def vocab(self, node: LayerIR) -> None:
        """Vocab-parallel LM head: this rank's logit columns, gathered as [n, rows, V/n]
        by a CONCAT site, then transposed and viewed back to the logits' shape."""
        g = self.g
        y = node.outputs[0]
        t = g.tensors[y]
        self.weight(node.inputs[1], -1, node)
        if len(node.inputs) > 2 and node.inputs[2]:
            self.weight(node.inputs[2], -1, node)
        self.gemm_shape(node)
        rows, v = math.prod(t.shape[:-1]), t.shape[-1]
        k = v // self.n
        gathered = self._tensor(f"{y}@gathered", [self.n, rows, k], t)
        swapped = self._tensor(f"{y}@swapped", [rows, self.n, k], t)
        part = f"{y}@part"
        g.tensors[part] = TensorIR(id=part, shape=[*t.shape[:-1], k], dtype=t.dtype)
        node.outputs = [part if o == y else o for o in node.outputs]
        meta = _site_meta(node)
        shard = part
        if g.tensors[part].shape != [1, rows, k]:
            shard = self._tensor(f"{y}@shard", [1, rows, k], t)
            self.nodes.append(LayerIR(id=f"{node.id}.shard", op_type="RESHAPE", inputs=[part],
                                      outputs=[shard],
                                      attributes={"shape": [1, rows, k], "view": True},
                                      metadata=dict(meta)))
        self.nodes += [
            LayerIR(id=f"{node.id}.allgather", op_type="CONCAT", inputs=[shard] * self.n,
                    outputs=[gathered], attributes={"axis": 0}, metadata=dict(meta)),
            LayerIR(id=f"{node.id}.unshard", op_type="TRANSPOSE", inputs=[gathered],
                    outputs=[swapped], attributes={"perm": [1, 0, 2], "view": False},
                    metadata=dict(meta)),
            LayerIR(id=f"{node.id}.logits", op_type="RESHAPE", inputs=[swapped], outputs=[y],
                    attributes={"shape": list(t.shape), "view": True}, metadata=dict(meta)),
        ]
        self.out.sites.append(ParallelSite(f"{node.id}.allgather", "all_gather", shard,
                                           gathered))

    def _tensor(self, tid: str, shape: list[int], like: TensorIR) -> str:
        self.g.tensors[tid] = TensorIR(id=tid, shape=shape, dtype=like.dtype)
        return tid

    def column_gemms(self) -> set[str]:
        """The GEMMs that start an MLP: those behind the data input of a GEMM through
        MLP_PATH ops only (the MLP's last GEMM is then row-parallel)."""
        g = self.g
        found: set[str] = set()
        for node in g.nodes:
            if node.op_type != "GEMM":
                continue
            starts = self._mlp_starts(node.inputs[0])
            if starts:
                found.update(starts)
        return found

    def _mlp_starts(self, tid: str) -> set[str] | None:
        """The GEMMs every path back from `tid` through MLP_PATH ops ends at (None when a
        path ends elsewhere, or at once: `tid` straight from a GEMM is no MLP)."""
        g = self.g
        src = g.tensors[tid].producer
        if src is None:
            return None
        first = g.node(src)
        if first.op_type not in MLP_PATH - {"RESHAPE"} and not (
                first.op_type == "RESHAPE" and self._mlp_starts(first.inputs[0])):
            return None
        starts: set[str] = set()
        stack, seen = [first], set()
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.op_type == "GEMM":
                starts.add(n.id)
                continue
            if n.op_type not in MLP_PATH:
                return None
            for x in n.inputs:
                if not x or g.tensors[x].const:
                    continue
                p = g.tensors[x].producer
                if p is None:
                    return None
                stack.append(g.node(p))
        return starts or None


def _site_meta(node: LayerIR) -> dict:
    """A site's metadata: the block of the GEMM it follows (block replay keeps it)."""
    return {k: v for k, v in node.metadata.items() if k == "block"}


def shard_graph(graph: Graph, n: int, rank: int) -> TpGraph:
    """The graph rank `rank` of `n` runs (see the module docstring). `graph` is left as
    it is (nodes and tensors are copied; weight arrays are shared or sliced)."""
    memo = {id(a): a for a in graph.weights.values()}
    g = copy.deepcopy(graph, memo)
    g.weights = dict(g.weights)
    if n == 1:
        return TpGraph(g)
    if any(node.op_type in ("MOE_ROUTE", "TOPK") for node in g.nodes):
        raise InputError(f"--tp {n}: mixture-of-experts models are not split by --tp "
                         "(split its experts with --ep)", field="--tp")
    out = _Sharder(g, n, rank).run()
    if not out.sites:
        raise InputError(f"--tp {n}: the model has no attention or MLP block to split",
                         field="--tp")
    keep = []
    for s in out.sites:  # the storages behind the collectives' buffers stay whole
        keep += [s.src, s.dst]
        src = g.node(g.tensors[s.src].producer or "")
        if s.op == "all_gather" and src.op_type == "RESHAPE":  # a view of the head's output
            keep.append(src.inputs[0])
    g.metadata["collective_buffers"] = sorted(set(keep))
    return out
