"""Which attention layers are blocked along the KV sequence, and by how many keys.

A tiled ATTENTION keeps the K and V of one (batch, KV group) in TCM, one bank each, and a
row of scores per query row; when the sequence is too long for that, the layer is computed
block by block with an online softmax (`kernbench.numerics.flash`, ADR-0704). That changes
the layer's numerics (each block quantizes its probabilities with its own row scales), so
the decision is an IR attribute, `kv_block` (keys per block), which the interpreter reads
too; layers that fit keep their unblocked semantics (and outputs).
"""

from __future__ import annotations

from kernbench.compiler.layout import tiled_attention
from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph, LayerIR


def kv_stored_int(g: Graph, tid: str) -> bool:
    """True when the K / V tensor is a present cache stored at integer KV bits (the memory
    plan stores it int16 / int8 / int4, so the tiles load it without a staging fp32 copy)."""
    t = g.tensors[tid]
    if t.producer is None:
        return False
    n = g.node(t.producer)
    return n.op_type == "KV_UPDATE" and t.quant is not None and t.dtype == "fp32" \
        and t.quant.dtype in ("int8", "int4", "int16")


def kv_block_size(g: Graph, n: LayerIR, bank: int) -> int | None:
    """Keys per block for attention `n` with `bank`-byte TCM banks, or None when the whole
    K / V of a head (and a score row) fit, so the layer is not blocked."""
    k, v = g.tensors[n.inputs[1]], g.tensors[n.inputs[2]]
    t_len, width = int(k.shape[2]), max(int(k.shape[3]), int(v.shape[3]))
    isz = n.qbits_kv / 8 if kv_stored_int(g, k.id) and kv_stored_int(g, v.id) else 4
    if t_len * width * isz <= bank and t_len * 4 <= bank:
        return None
    # half a bank per K / V block leaves room for the scores, probabilities and states
    blk = max(2, min(int(bank // (2 * width * isz)), bank // 16)) // 2 * 2  # whole bytes
    return blk if blk < t_len else None


def block_attention(state: CompileState) -> int:
    """Set `kv_block` on every tiled ATTENTION whose K / V do not fit; returns how many."""
    tcm = state.topology.config.cube.pe_template.pe_tcm
    bank = tcm.capacity_kib * 1024 // tcm.banks
    count = 0
    for n in state.graph.nodes:
        if n.op_type != "ATTENTION" or not tiled_attention(state.graph, n):
            continue
        blk = kv_block_size(state.graph, n, bank)
        if blk is None:
            n.attributes.pop("kv_block", None)
        else:
            n.attributes["kv_block"] = blk
            count += 1
    return count
