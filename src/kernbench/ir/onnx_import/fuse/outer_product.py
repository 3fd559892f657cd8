"""A MatMul whose inner dimension is 1 -> MUL (an outer product is a broadcast multiply).

    A [..., M, 1] @ B [..., 1, N] = A * B   (batch axes broadcast the same way)

Exporters write it where a vector is spread over another (Optimum's Llama rotary
embedding: inv_freq [B, D/2, 1] @ positions [B, 1, S]). Each output element is one
product, so the MUL computes the same floats, and it is a vector layer, tiled and never
quantized as a tensor-engine operand would be. Operands of rank < 2, integer or quantized
operands are left alone.
"""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import Index, new_layer, replace, rewrite_until_fixed

FLOATS = ("fp32", "fp16", "bf16")


def _rewrite(g: Graph, ix: Index, n: LayerIR) -> bool:
    if n.op_type != "MATMUL" or len(n.inputs) != 2 or not all(n.inputs):
        return False
    a, b, y = (g.tensors[t] for t in (*n.inputs, n.outputs[0]))
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != 1 or b.shape[-2] != 1:
        return False
    if any(t.dtype not in FLOATS or t.quant is not None for t in (a, b, y)) \
            or len({a.dtype, b.dtype, y.dtype}) != 1:
        return False
    try:
        if list(np.broadcast_shapes(tuple(a.shape), tuple(b.shape))) != list(y.shape):
            return False
    except ValueError:
        return False
    replace(g, [n], new_layer("MUL", list(n.inputs), [y.id], {}, n), n)
    return True


def fuse_outer_product(g: Graph) -> None:
    rewrite_until_fixed(g, _rewrite)
