"""QUANTIZE -> DEQUANTIZE pairs on activations -> QDQ (fake quantization), then QDQ layers
that only feed TE inputs (GEMM / QKV_PROJ / MATMUL input 0) are absorbed: their scale and
zero point become the static `quant` of the activation tensor, the TE reads it directly.
GEMMs whose weight is an imported integer tensor get `imported_qbits` metadata."""

from __future__ import annotations

from kernbench.ir.model import Graph, QuantParams
from kernbench.ir.onnx_import.fuse.common import Index, new_layer, onnx_nodes, replace
from kernbench.ir.ops import node_attrs

TE_INPUT0 = ("GEMM", "QKV_PROJ", "CONV")


def _bits(dtype: str) -> int:
    return int(dtype.lstrip("uint"))


def fuse_qdq(g: Graph) -> None:
    ix = Index(g)
    for q in list(g.nodes):
        if q.op_type != "QUANTIZE":
            continue
        y = q.outputs[0]
        uses = ix.uses(y)
        if not uses or y in ix.outputs or any(u.op_type != "DEQUANTIZE" for u in uses):
            continue
        if any(u.inputs[1:] != q.inputs[1:] or node_attrs(u).axis != node_attrs(q).axis
               for u in uses):  # fmt: skip
            continue
        for dq in uses:
            node = new_layer("QDQ", list(q.inputs), list(dq.outputs), dict(q.attributes), dq,
                             onnx_nodes(q, dq))  # fmt: skip
            replace(g, [dq], node, dq)
        g.nodes = [n for n in g.nodes if n is not q]
    # absorb
    ix = Index(g)
    for n in list(g.nodes):
        if n.op_type != "QDQ" or node_attrs(n).axis is not None:
            continue
        x, y = n.inputs[0], n.outputs[0]
        uses = ix.uses(y)
        if not uses or y in ix.outputs:
            continue
        if any(u.op_type not in TE_INPUT0 or u.inputs[0] != y or y in u.inputs[1:] for u in uses):
            continue
        xt = g.tensors[x]
        qp = QuantParams(scale=n.inputs[1], zero_point=n.inputs[2] if len(n.inputs) > 2 else None,
                         axis=None, block_size=0, dtype=node_attrs(n).dtype)  # fmt: skip
        if xt.const or (xt.quant is not None and xt.quant != qp):
            continue
        xt.quant = qp
        for u in uses:
            u.inputs[0] = x
            imp = u.metadata.setdefault("imported_qbits", {})
            imp["activation"] = _bits(qp.dtype)
        g.nodes = [m for m in g.nodes if m is not n]
        ix = Index(g)
    for n in g.nodes:
        if n.op_type in ("GEMM", "CONV"):
            wt = g.tensors[n.inputs[1]]
            if wt.quant is not None:
                n.metadata.setdefault("imported_qbits", {})["weight"] = _bits(wt.quant.dtype)
