"""The fallback: a whole layer on one PE (VE_LAYER_OP / TE_LAYER_OP).

`lower_node` runs a layer whole when its op type has no entry in LOWERINGS (EXPAND, PAD,
TILE, EINSUM, TOPK, SCATTER_*, GROUP_NORM, CONV_INTEGER, ..., or a RESHAPE that is not a
view) or when its lowering returns False (e.g. an fp16 / bf16 attention too long for a bank,
MATMUL at fp16 or 4 bits, per-channel QDQ, interleaved RoPE, 3-D or int4 CONV, a slice
stepping along the innermost axis, a MatMulInteger outside the dynamic-quantization
pattern, blocked int4 GEMM weights; docs/compiler.md lists them). The layer runs on the
next PE, streamed through the scheduler's staging TCM. The op names its
HBM reads and writes for the schedule, its byte counts and, for timing, (m, n, k) of a
tensor-engine layer or the pe_math cost-table entry of a vector-engine one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.values import HbmRange
from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.ops import OPS, node_attrs, ops_where

#: the ops a whole layer runs on the tensor engine (`IrOp.vector` False)
TE_LAYER_OPS = ops_where(lambda c: not c.vector)


def cost_op(n: LayerIR) -> str:
    """The pe_math cost-table entry that prices a whole layer run on the vector engine
    (its op class's, `IrOp.cost_of`)."""
    return OPS[n.op_type].cost_of(n)


def _width(bits: int | str | None, dtype: str | None) -> int:
    """The array's operand width of a layer bits value (int, "fp16", "bf16", None) whose
    tensor has `dtype`: the integer bits; 16 for a 16-bit float; else an integer tensor's
    own bits (imported int8 data); else 32 (fp32)."""
    if isinstance(bits, int):
        return bits
    if bits in ("fp16", "bf16", "bfp8_b", "bfp4_b"):
        return 16  # a block float enters the array as bf16
    return {"int8": 8, "uint8": 8, "int4": 4, "uint4": 4, "int16": 16, "uint16": 16,
            "fp16": 16, "bf16": 16}.get(dtype or "", 32)


def te_widths(g: Graph, n: LayerIR) -> tuple[int, int]:
    """(qbits_weight, qbits_activation) of a TE layer run whole: the widths its MACs take.
    The "weight" of an ATTENTION is K / V (its KV bits), of a MATMUL its second
    operand; QLinear / integer layers read their int8 tensors."""
    ins = [g.tensors[t] if t else None for t in n.inputs]
    a_t = ins[0] if ins else None
    if n.op_type in ("QLINEAR_MATMUL", "QLINEAR_CONV"):
        w_t = ins[3] if len(ins) > 3 else None
    else:
        w_t = ins[1] if len(ins) > 1 else None
    qa = _width(n.qbits_activation, a_t.dtype if a_t else None)
    if n.op_type == "ATTENTION":
        qw = _width(n.qbits_kv, w_t.dtype if w_t else None)
    elif n.qbits_weight is not None:
        qw = _width(n.qbits_weight, w_t.dtype if w_t else None)
    elif n.op_type in ("MATMUL",) and isinstance(n.qbits_activation, int):
        qw = qa  # two activations, both quantized at the activation bits
    else:
        qw = _width(None, w_t.dtype if w_t else None)
    return qw, qa


def te_dims(g: Graph, n: LayerIR) -> tuple[int, int, int]:
    """(m, n, k) of a TE layer run whole, for its timing."""
    ins = [g.tensors[t] for t in n.inputs if t]
    out = g.tensors[n.outputs[0]]
    osz = int(np.prod(out.shape)) if out.shape else 1
    if n.op_type in ("CONV", "QLINEAR_CONV", "CONV_INTEGER"):
        w = ins[3 if n.op_type == "QLINEAR_CONV" else 1].shape
        k = int(np.prod(w[1:]))
        return max(1, osz // w[0]), w[0], k
    if n.op_type == "ATTENTION":
        q, kk = ins[0].shape, ins[1].shape
        return int(np.prod(q[:-1])), kk[-2], q[-1]
    if n.op_type == "QLINEAR_MATMUL":
        a, b = ins[0].shape, ins[3].shape
    else:
        a, b = ins[0].shape, ins[1].shape
    k = a[-1] if a else 1
    nn = b[-1] if b else 1
    return max(1, osz // max(nn, 1)), nn, k


def _reads(lw: Lowering, n: LayerIR) -> tuple[list[HbmRange], int, Placement | None]:
    """HBM ranges of the non-constant inputs, bytes of all inputs, the first input."""
    reads: list[HbmRange] = []
    in_bytes, first = 0, None
    for tid in n.inputs:
        if not tid:
            continue
        p = lw.placement(tid)
        nb = int(math.ceil(int(np.prod(p.shape)) * ITEMSIZE[p.dtype])) if p.shape else 8
        if n.op_type == "EMBEDDING" and node_attrs(n).gather_rows and tid == n.inputs[1]:
            # a row gather reads the rows it gathers, not the table
            ids = int(np.prod(lw.g.tensors[n.inputs[0]].shape))
            nb = int(math.ceil(ids * p.shape[-1] * ITEMSIZE[p.dtype]))
        in_bytes += nb
        first = first if first is not None else p
        if not lw.g.tensors[tid].const:
            lo = p.addr
            hi = p.addr + int(math.ceil(
                (sum((d - 1) * s for d, s in zip(p.shape, p.strides, strict=True)) + 1)
                * ITEMSIZE[p.dtype]))
            reads.append((p.key, lo, hi, hi - lo, hi - lo))
    return reads, in_bytes, first


def _writes(lw: Lowering, n: LayerIR) -> tuple[list[HbmRange], int, int]:
    """HBM ranges of the placed outputs, their bytes, the largest output's elements."""
    writes, out_bytes, elements = [], 0, 1
    for tid in n.outputs:
        if not tid:
            continue
        p = lw.plan.placements.get(tid)
        if p is None:
            continue
        nb = int(math.ceil(int(np.prod(p.shape)) * ITEMSIZE[p.dtype]))
        out_bytes += nb
        elements = max(elements, int(np.prod(p.shape)))
        writes.append((p.key, p.addr, p.addr + nb, nb, nb))
    return writes, out_bytes, elements


def lower_layer_op(lw: Lowering, n: LayerIR) -> None:
    """Run a whole layer on one PE (VE_LAYER_OP / TE_LAYER_OP), recorded in
    `TileGraph.whole`. It reads and writes whole tensors at one address: the plan pass
    pinned the spread storages of the layers it runs whole (`whole_plan`), and
    `checks.check_tiles` refuses a layer run whole that the plan does not name."""
    lw.tg.whole.add(n.id)
    pe = lw.next_pe()
    reads, in_bytes, first = _reads(lw, n)
    writes, out_bytes, elements = _writes(lw, n)
    fields: dict[str, Any] = {"layer_id": n.id, "in_bytes": in_bytes,
                              "out_bytes": out_bytes,
                              "dram_addr": first.addr_in(lw.cube(pe)) if first else 0}
    if n.op_type in TE_LAYER_OPS:
        m, nn, k = te_dims(lw.g, n)
        fields.update({"m": m, "n": nn, "k": k})
        # the operands' widths price the array (8 is the opcode's default, left out)
        fields.update({f: b for f, b in zip(("qbits_weight", "qbits_activation"),
                                            te_widths(lw.g, n), strict=True) if b != 8})
        opcode = "TE_LAYER_OP"
    else:
        fields["elements"] = elements
        fields["op"] = cost_op(n)
        opcode = "VE_LAYER_OP"
    lw.op(opcode, pe, n.id, fields, hbm_reads=reads, hbm_writes=writes)
