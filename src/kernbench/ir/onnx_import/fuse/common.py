"""Helpers shared by the fusion patterns: graph index, elementwise op names, constants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.onnx_import.onnx_util import dtype_of_array
from kernbench.ir.ops import node_attrs

_ids = itertools.count()


class Index:
    """producer / consumers maps of a graph (rebuild after every rewrite)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.producer: dict[str, LayerIR] = {}
        self.consumers: dict[str, list[LayerIR]] = {}
        self.pos: dict[int, int] = {}
        for i, n in enumerate(g.nodes):
            self.pos[id(n)] = i
            for o in n.outputs:
                if o:
                    self.producer[o] = n
            for t in n.inputs:
                if t:
                    self.consumers.setdefault(t, []).append(n)
        self.outputs = set(g.outputs)

    def prod(self, tid: str) -> LayerIR | None:
        return self.producer.get(tid)

    def uses(self, tid: str) -> list[LayerIR]:
        return self.consumers.get(tid, [])

    def single_use(self, tid: str) -> bool:
        return len(self.uses(tid)) == 1 and tid not in self.outputs


def ew(n: LayerIR | None) -> str | None:
    """'add' / 'mul' / the ELEMENTWISE op of a layer, else None."""
    if n is None:
        return None
    if n.op_type == "ADD":
        return "add"
    if n.op_type == "MUL":
        return "mul"
    if n.op_type == "ELEMENTWISE":
        return node_attrs(n).op
    return None


def const_value(g: Graph, tid: str) -> np.ndarray | None:
    t = g.tensors.get(tid)
    if t is None or not t.const or t.quant is not None or tid not in g.weights:
        return None
    return g.weights[tid]


def scalar(g: Graph, tid: str) -> float | None:
    v = const_value(g, tid)
    if v is None or v.size != 1 or v.dtype.kind not in "fV":  # V: bfloat16, fp8
        return None
    return float(v.reshape(-1)[0])


def qdq8(g: Graph, n: LayerIR | None) -> bool:
    """n is a per-tensor 8-bit QDQ (int8 or uint8) with a constant scalar scale and zero
    point: a fake quantization an integer TE operand can stand in for."""
    if n is None or n.op_type != "QDQ":
        return False
    a = node_attrs(n)
    if a.axis is not None or a.block_size or a.dtype not in ("int8", "uint8"):
        return False
    return all(g.tensors[x].const and int(np.asarray(g.weights[x]).size) == 1
               for x in n.inputs[1:3] if x)


def other_input(n: LayerIR, tid: str) -> str | None:
    if len(n.inputs) != 2:
        return None
    a, b = n.inputs
    if a == tid:
        return b
    if b == tid:
        return a
    return None


def new_layer(op_type: str, inputs: list[str], outputs: list[str], attributes: dict[str, Any],
              like: LayerIR, onnx_nodes: list[str] | None = None) -> LayerIR:  # fmt: skip
    md = {"layer_name": like.metadata.get("layer_name", ""),
          "onnx_nodes": onnx_nodes if onnx_nodes is not None else
          list(like.metadata.get("onnx_nodes", []))}  # fmt: skip
    if "imported_qbits" in like.metadata:
        md["imported_qbits"] = dict(like.metadata["imported_qbits"])
    return LayerIR(id=f"fused{next(_ids)}", op_type=op_type, inputs=inputs, outputs=outputs,
                   attributes=attributes, metadata=md)  # fmt: skip


def replace(g: Graph, old: list[LayerIR], new: LayerIR, at: LayerIR) -> None:
    """Insert `new` where `at` is and drop the layers in `old` (by identity)."""
    i = next(k for k, n in enumerate(g.nodes) if n is at)
    g.nodes.insert(i, new)
    drop = {id(n) for n in old}
    g.nodes = [n for n in g.nodes if id(n) not in drop]


def add_const(g: Graph, base: str, a: np.ndarray) -> str:

    k = 0
    name = f"{base}:f"
    while name in g.tensors:
        k += 1
        name = f"{base}:f{k}"
    a = np.ascontiguousarray(a)
    a.flags.writeable = False  # a weight: nothing changes it in place
    g.weights[name] = a
    g.tensors[name] = TensorIR(id=name, shape=list(a.shape), dtype=dtype_of_array(a),
                               role="weight", const=True)  # fmt: skip
    return name


def add_tensor(g: Graph, base: str, shape: list[int], dtype: str) -> str:

    k = 0
    name = f"{base}:v"
    while name in g.tensors:
        k += 1
        name = f"{base}:v{k}"
    g.tensors[name] = TensorIR(id=name, shape=list(shape), dtype=dtype)
    return name


def onnx_nodes(*layers: LayerIR) -> list[str]:
    out: list[str] = []
    for n in layers:
        for x in n.metadata.get("onnx_nodes", []):
            if x not in out:
                out.append(x)
    return out


def rewrite_until_fixed(g: Graph, rewrite: Callable[[Graph, Index, LayerIR], bool]) -> None:
    """Apply `rewrite(g, ix, node) -> bool` to every node until none changes the graph. A
    successful rewrite edits the node list, so the scan restarts with a fresh Index."""
    changed = True
    while changed:
        changed = False
        ix = Index(g)
        for n in g.nodes:
            if rewrite(g, ix, n):
                changed = True
                break
