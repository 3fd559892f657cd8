"""GEMM + ADD(constant bias of shape [N]) -> GEMM with bias."""

from __future__ import annotations

from kernbench.ir.model import Graph
from kernbench.ir.onnx_import.fuse.common import Index, const_value, onnx_nodes, other_input


def fuse_gemm_bias(g: Graph) -> None:
    changed = True
    while changed:
        changed = False
        ix = Index(g)
        for n in g.nodes:
            if n.op_type != "GEMM" or len(n.inputs) != 2:
                continue
            y = n.outputs[0]
            if not ix.single_use(y):
                continue
            add = ix.uses(y)[0]
            if add.op_type != "ADD":
                continue
            b = other_input(add, y)
            bv = const_value(g, b) if b else None
            nout = g.tensors[n.inputs[1]].shape[1]
            if bv is None or bv.ndim != 1 or bv.shape[0] != nout:
                continue
            if g.tensors[add.outputs[0]].shape != g.tensors[y].shape:
                continue
            n.inputs = [n.inputs[0], n.inputs[1], b]
            n.outputs = [add.outputs[0]]
            n.metadata["onnx_nodes"] = onnx_nodes(n, add)
            g.nodes = [m for m in g.nodes if m is not add]
            del g.tensors[y]
            changed = True
            break
