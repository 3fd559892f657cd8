"""GEMM + ADD(constant bias of shape [N]) -> GEMM with bias."""

from __future__ import annotations

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    const_value,
    onnx_nodes,
    other_input,
    rewrite_until_fixed,
)


def fuse_gemm_bias(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)


def _rewrite(g: Graph, ix: Index, n: LayerIR) -> bool:
    if n.op_type != "GEMM" or len(n.inputs) != 2:
        return False
    y = n.outputs[0]
    if not ix.single_use(y):
        return False
    add = ix.uses(y)[0]
    if add.op_type != "ADD":
        return False
    b = other_input(add, y)
    bv = const_value(g, b) if b else None
    nout = g.tensors[n.inputs[1]].shape[1]
    if bv is None or bv.ndim != 1 or bv.shape[0] != nout:
        return False
    if g.tensors[add.outputs[0]].shape != g.tensors[y].shape:
        return False
    n.inputs = [n.inputs[0], n.inputs[1], b]
    n.outputs = [add.outputs[0]]
    n.metadata["onnx_nodes"] = onnx_nodes(n, add)
    g.nodes = [m for m in g.nodes if m is not add]
    del g.tensors[y]
    return True
