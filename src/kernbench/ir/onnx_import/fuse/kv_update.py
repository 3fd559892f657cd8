"""CONCAT(past key/value graph input, new k/v, axis=2 of a rank-4 BHSD tensor) -> KV_UPDATE."""

from __future__ import annotations

from kernbench.ir.model import Graph
from kernbench.ir.ops import node_attrs


def fuse_kv_update(g: Graph) -> None:
    inputs = set(g.inputs)
    for n in g.nodes:
        if n.op_type != "CONCAT" or len(n.inputs) != 2 or node_attrs(n).axis != 2:
            continue
        past = n.inputs[0]
        if past not in inputs or len(g.tensors[past].shape) != 4:
            continue
        n.op_type = "KV_UPDATE"
        n.attributes = {"axis": 2}
