"""Do a model's constants and inputs fit in every cube? The choice between copies in
every cube and a layout placed once (`MemoryPlan.replicate_constants`, memory_plan).

Copies give every PE a local copy to read; that is the layout the compiler prefers. A
model whose constants and graph inputs (a long past KV cache) do not fit beside the
activations in each cube's HBM cannot be laid out that way at all, so they are placed
once each: constants by `MemoryPlan.constant` (a TE weight's panels by use:
lower.weight_home), inputs spread by rows over the cubes. The choice is made from an
estimate taken before the lowering chooses each constant's representation: every
constant at the width it is stored at (a TE weight at its layer's weight bits, any other
constant at its dtype), every input at its dtype.

A run that simulates the first blocks of a model and replays the rest
(host.block_replay) compiles a truncated graph: it keeps `REPLAY_KEPT_BLOCKS` of the
model's `REPLAY_OF_BLOCKS` blocks (graph metadata), so the whole model's constants (and
inputs) are those outside the blocks plus those of its blocks scaled by their ratio. That
holds for a part of the truncated graph too (a tensor-parallel rank's shard, a pipeline
stage's blocks), so each program is laid out as its share of the whole model would be.
"""

from __future__ import annotations

import math

from kernbench.ir.model import Graph
from kernbench.ir.qconfig import WEIGHT_OPS
from kernbench.numerics.block_float import FORMATS as BFP_FORMATS
from kernbench.numerics.dtypes import bits as dtype_bits

#: graph metadata of a truncated graph (host.block_replay.truncate_blocks): the blocks of
#: the whole model, and how many of them the truncated graph kept
REPLAY_OF_BLOCKS = "replay_of_blocks"
REPLAY_KEPT_BLOCKS = "replay_kept_blocks"


def _stored_bits(q: object, dtype: str) -> float:
    """Bits an element of a constant takes in HBM, given its layer's weight bits `q`."""
    if isinstance(q, int) and not isinstance(q, bool):
        return q
    if q in ("fp16", "bf16"):
        return 16
    if isinstance(q, str) and q in BFP_FORMATS:
        return BFP_FORMATS[q].bytes_per_element * 8
    return dtype_bits(dtype)


def _widths(g: Graph) -> dict[str, float]:
    """Bits an element of each constant takes in HBM: a weight matrix (or conv kernel) a
    GEMM / QKV_PROJ / CONV reads at that layer's `qbits_weight`, any other constant (a
    bias, a norm's scale, a table) at its dtype; the widest width any reader stores."""
    widths: dict[str, float] = {}
    for n in g.nodes:
        for i, tid in enumerate(n.inputs):
            t = g.tensors.get(tid) if tid else None
            if t is None or not t.const:
                continue
            q = n.qbits_weight if n.op_type in WEIGHT_OPS and i >= 1 and len(t.shape) >= 2 \
                else None
            widths[tid] = max(widths.get(tid, 0.0), _stored_bits(q, t.dtype))
    return widths


def _bytes(g: Graph, tid: str, bits: float) -> int:
    return math.ceil(math.prod(g.tensors[tid].shape) * bits / 8)


def constant_bytes(g: Graph) -> int:
    """Estimated HBM bytes of one copy of the graph's constants (`_widths`)."""
    return sum(_bytes(g, tid, b) for tid, b in _widths(g).items())


def _blocks_of(g: Graph) -> dict[str, set[object]]:
    """The blocks whose layers read each tensor (None for a layer outside the blocks)."""
    out: dict[str, set[object]] = {}
    for n in g.nodes:
        b = n.metadata.get("block")
        for tid in n.inputs:
            if tid:
                out.setdefault(tid, set()).add(b if isinstance(b, int) else None)
    return out


def _whole_model(g: Graph, sizes: dict[str, int]) -> int:
    """The bytes `sizes` (per tensor) of the whole model (or share of it) that `g` stands
    for: as they are, but for a truncated graph each tensor of one block's own (not one
    the blocks share, such as rotary tables) scaled by `REPLAY_OF_BLOCKS` /
    `REPLAY_KEPT_BLOCKS`."""
    whole, kept = g.metadata.get(REPLAY_OF_BLOCKS), g.metadata.get(REPLAY_KEPT_BLOCKS)
    if not isinstance(whole, int) or not isinstance(kept, int) or kept < 1:
        return sum(sizes.values())
    blocks_of = _blocks_of(g)
    outside = inside = 0
    for tid, nb in sizes.items():
        bs = blocks_of.get(tid, {None})
        if len(bs) == 1 and None not in bs:
            inside += nb
        else:
            outside += nb
    return outside + math.ceil(inside * whole / kept)


def model_constant_bytes(g: Graph) -> int:
    """`constant_bytes` of the whole model (or share of it) that `g` stands for."""
    return _whole_model(g, {tid: _bytes(g, tid, b) for tid, b in _widths(g).items()})


def model_input_bytes(g: Graph) -> int:
    """Bytes of one copy of the graph inputs of the whole model (or share of it) that `g`
    stands for, each at its dtype (a past KV cache is one block's own)."""
    return _whole_model(g, {tid: _bytes(g, tid, dtype_bits(g.tensors[tid].dtype))
                            for tid in g.inputs})
