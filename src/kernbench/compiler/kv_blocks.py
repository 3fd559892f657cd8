"""Which attention layers are blocked along the KV sequence, and by how many keys.

A tiled ATTENTION keeps the K and V of one (batch, KV group) in TCM, one bank each, and a
row of scores per query row; when the sequence is too long for that, the layer is computed
block by block with an online softmax (`kernbench.numerics.flash`). That changes
the layer's numerics (each block quantizes its probabilities with its own row scales), so
the decision is an IR attribute, `kv_block` (keys per block), which the interpreter reads
too; layers that fit keep their unblocked semantics (and outputs).

A layer with few query rows per (batch, KV group) and many keys (a decode step) is also
split along the keys over PEs (`kv_parts`, flash-decoding): one PE per group
would leave most of the NPU idle while its tensor engine runs one-row folds over the whole
cache. Each range is then blocked by `kv_block` if it does not fit a bank alone.
"""

from __future__ import annotations

from kernbench.compiler.layout import float_formats, tiled_attention
from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.ops import node_attrs
from kernbench.numerics.flash import longest_part


def kv_stored_int(g: Graph, tid: str) -> bool:
    """True when the K / V tensor is a present cache stored at integer KV bits (the memory
    plan stores it int16 / int8 / int4, so the tiles load it without a staging fp32 copy)."""
    t = g.tensors[tid]
    if t.producer is None:
        return False
    n = g.node(t.producer)
    return n.op_type == "KV_UPDATE" and isinstance(n.qbits_kv, int) and t.quant is not None \
        and t.dtype == "fp32" and t.quant.dtype in ("int8", "int4", "int16")


#: fewest keys per range of a split attention: below, the per-range overhead (Q load,
#: scratch store, combine, a fold's fill and drain) outweighs the shorter K loop
MIN_PART_KEYS = 128


def kv_parts_for(g: Graph, n: LayerIR, n_pes: int, array_rows: int) -> int:
    """Key ranges for integer attention `n` on `n_pes` PEs: the PEs one per (batch, KV
    group) would leave idle, when each group's query rows fit one fold of the array
    (`array_rows`) and each range keeps at least MIN_PART_KEYS keys; 1: no split."""
    q, k = g.tensors[n.inputs[0]], g.tensors[n.inputs[1]]
    if n.qbits_activation != 8 or not isinstance(n.qbits_kv, int) \
            or node_attrs(n).softcap:
        return 1  # the key ranges' combine is 8-bit only
    bsz, hq, s_len = (int(x) for x in q.shape[:3])
    hkv, t_len = int(k.shape[1]), int(k.shape[2])
    if s_len * (hq // hkv) > array_rows:
        return 1
    return max(1, min(n_pes // max(1, bsz * hkv), t_len // MIN_PART_KEYS))


#: folds of keys the owner's range may hold over an equal share (`kv_first_for`): about
#: what the helpers' partial outputs take to be stored and loaded; 0 keeps
#: the ranges equal (benchmarks/decode_ablation.py)
OWNER_EXTRA_FOLDS = 2


def kv_first_for(t_len: int, parts: int, cols: int) -> int:
    """Keys of the owner's range (range 0) of an attention split into `parts` ranges, on
    an array `cols` columns wide; 0: equal ranges. The helpers take whole folds (their
    Q·Kᵀ of one query row costs one fold per `cols` keys: a range of 205 keys pays 7
    folds, 192 pay 6) and the owner the rest, as long as that is at most
    OWNER_EXTRA_FOLDS folds more than an equal share (gpt2-small decode, kv 1024, five
    ranges: 256 + 4 × 192 keys)."""
    if parts < 2:
        return 0
    helper = t_len // parts // cols * cols
    first = t_len - (parts - 1) * helper
    if not helper or first == helper or first - t_len / parts > OWNER_EXTRA_FOLDS * cols:
        return 0
    return first


def kv_block_size(g: Graph, n: LayerIR, bank: int, parts: int = 1,
                  first: int = 0) -> int | None:
    """Keys per block for attention `n` with `bank`-byte TCM banks when its keys are split
    into `parts` ranges (the first of `first` keys, when set), or None when the whole K /
    V of the longest range (and a score row) fit, so the layer is not blocked."""
    k, v = g.tensors[n.inputs[1]], g.tensors[n.inputs[2]]
    t_len = longest_part(int(k.shape[2]), parts, first)
    width = max(int(k.shape[3]), int(v.shape[3]))
    # a float attention reads an integer-stored cache dequantized to fp32 rows
    isz = n.qbits_kv / 8 if kv_stored_int(g, k.id) and kv_stored_int(g, v.id) \
        and float_formats(n) is None else 4
    if t_len * width * isz <= bank and t_len * 4 <= bank:
        return None
    # half a bank per K / V block leaves room for the scores, probabilities and states
    blk = max(2, min(int(bank // (2 * width * isz)), bank // 16)) // 2 * 2  # whole bytes
    return blk if blk < t_len else None


def block_attention(state: CompileState) -> int:
    """Set `kv_parts` on every tiled integer ATTENTION worth splitting over PEs and
    `kv_block` on every one whose K / V (of a range) do not fit; returns how many layers
    are blocked or split."""
    pt = state.topology.config.cube.pe_template
    bank = pt.pe_tcm.capacity_kib * 1024 // pt.pe_tcm.banks
    n_pes = len(state.topology.pes)
    count = 0
    for n in state.graph.nodes:
        if n.op_type != "ATTENTION" or not tiled_attention(state.graph, n):
            continue
        parts = kv_parts_for(state.graph, n, n_pes, pt.pe_gemm.rows)
        first = kv_first_for(int(state.graph.tensors[n.inputs[1]].shape[2]), parts,
                             pt.pe_gemm.cols)
        if parts > 1:
            n.attributes["kv_parts"] = parts
            count += 1
        else:
            n.attributes.pop("kv_parts", None)
        if first:
            n.attributes["kv_first"] = first
        else:
            n.attributes.pop("kv_first", None)
        blk = kv_block_size(state.graph, n, bank, parts, first)
        if blk is None:
            n.attributes.pop("kv_block", None)
        else:
            n.attributes["kv_block"] = blk
            count += parts == 1
    return count
