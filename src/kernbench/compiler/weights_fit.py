"""Do a model's constants fit in every cube? The choice between replicated and
distributed constants (`MemoryPlan.replicate_constants`).

Replicated constants give every PE a local copy to read; that is the layout the compiler
prefers. A model whose constants do not fit beside the activations in each cube's HBM
cannot be laid out that way at all, so its constants are placed once each, spread over
the cubes (`MemoryPlan.constant`). The choice is made from an estimate taken before the
lowering chooses each constant's representation: every constant at the width it is
stored at (a TE weight at its layer's weight bits, any other constant at its dtype).

A run that simulates the first blocks of a model and replays the rest
(host.block_replay) compiles a truncated graph; the truncation records the whole
model's estimate in `Graph.metadata[MODEL_CONSTANT_BYTES]`, so the truncated program is
laid out as the whole model would be.
"""

from __future__ import annotations

import math

from kernbench.ir.model import Graph
from kernbench.ir.qconfig import WEIGHT_OPS
from kernbench.numerics.block_float import FORMATS as BFP_FORMATS
from kernbench.numerics.dtypes import bits as dtype_bits

#: metadata key of the whole model's constant bytes in a truncated graph
MODEL_CONSTANT_BYTES = "model_constant_bytes"


def _stored_bits(q: object, dtype: str) -> float:
    """Bits an element of a constant takes in HBM, given its layer's weight bits `q`."""
    if isinstance(q, int) and not isinstance(q, bool):
        return q
    if q in ("fp16", "bf16"):
        return 16
    if isinstance(q, str) and q in BFP_FORMATS:
        return BFP_FORMATS[q].bytes_per_element * 8
    return dtype_bits(dtype)


def constant_bytes(g: Graph) -> int:
    """Estimated HBM bytes of one copy of the graph's constants: a weight matrix a
    GEMM / QKV_PROJ / CONV reads at that layer's `qbits_weight`, any other constant (a
    bias, a norm's scale, a table) at its dtype (each tensor once, at the widest width a
    reader stores it at)."""
    widths: dict[str, float] = {}
    for n in g.nodes:
        for i, tid in enumerate(n.inputs):
            t = g.tensors.get(tid) if tid else None
            if t is None or not t.const:
                continue
            # a weight matrix (or conv kernel) at the layer's weight bits; its bias vector,
            # stored beside the epilogue's scales, at its dtype
            q = n.qbits_weight if n.op_type in WEIGHT_OPS and i >= 1 and len(t.shape) >= 2 \
                else None
            widths[tid] = max(widths.get(tid, 0.0), _stored_bits(q, t.dtype))
    return sum(math.ceil(math.prod(g.tensors[tid].shape) * b / 8) for tid, b in widths.items())


def model_constant_bytes(g: Graph) -> int:
    """`constant_bytes` of the whole model `g` stands for (itself unless truncated)."""
    return max(constant_bytes(g), int(g.metadata.get(MODEL_CONSTANT_BYTES, 0)))
