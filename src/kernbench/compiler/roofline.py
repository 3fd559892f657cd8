"""Roofline: an analytic lower bound per layer on the chosen hardware.

For a layer: compute bound = MACs / (peak MACs per ns of all PEs' arrays at the layer's
widest operand bitwidth: `operand_bits`) plus vector work / (all PEs' SIMD lanes × clock); memory bound =
compulsory HBM bytes (inputs read once, outputs written once, weights at their stored
bitwidth; of the data input of a gather or slice only what it selects) / aggregate HBM
bandwidth. The peaks come from kernbench.topology.peaks. bound = max of the two; `bound_by` names the larger.
A layer's simulated time is the span from its first entry's start to its last entry's
end; roofline_fraction = bound_ns / ns (1.0 = at the roofline). The model's fraction is
Σ bound / total simulated time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernbench.common.program import LayerSpan
from kernbench.compiler.hbm import BFP_FORMATS, ITEMSIZE
from kernbench.compiler.lower.layer_op import te_dims
from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.qconfig import WEIGHT_OPS
from kernbench.topology import peaks


def _macs(g: Graph, n: LayerIR) -> int:
    t = g.tensors
    if n.op_type == "GEMM":
        return n.shape.get("M", 1) * n.shape.get("N", 1) * n.shape.get("K", 1)
    if n.op_type == "QKV_PROJ":
        x = t[n.inputs[0]].shape
        m = int(np.prod(x[:-1]))
        return sum(m * x[-1] * t[w].shape[-1] for w in n.inputs[1:4])
    if n.op_type == "ATTENTION":
        q, k, v = (t[i].shape for i in n.inputs[:3])
        return int(np.prod(q[:-1])) * k[-2] * (q[-1] + v[-1])
    if n.op_type in ("MATMUL", "MATMUL_INTEGER", "QLINEAR_MATMUL", "CONV", "QLINEAR_CONV",
                     "CONV_INTEGER"):
        m, nn, k = te_dims(g, n)
        return m * nn * k
    return 0


def operand_bits(n: LayerIR) -> int:
    """The widest operand of the layer's MACs, which sets the array's peak: its weight
    (when it has one), its activation, and for ATTENTION its K / V (Q·Kᵀ and P·V take
    Q and P at activation bits, K and V at KV bits). An operand without integer bits is
    float: 16 for fp16 / bf16, else 32."""
    widths = [n.qbits_activation] + ([n.qbits_kv] if n.op_type == "ATTENTION" else []) \
        + ([n.qbits_weight] if n.qbits_weight is not None or n.op_type in WEIGHT_OPS else [])
    return max(b if isinstance(b, int) else (16 if b in ("fp16", "bf16", *BFP_FORMATS)
                                             else 32) for b in widths)


def _elements(g: Graph, n: LayerIR) -> int:
    return sum(int(np.prod(g.tensors[o].shape)) for o in n.outputs if o)


#: ops whose output is a selection of their data input: only the selected elements of it
#: are compulsory bytes (an embedding reads seq rows of its table, not the vocabulary)
SELECTING = frozenset({"EMBEDDING", "GATHER", "GATHER_ND", "GATHER_ELEMENTS", "SLICE"})


def _input_bytes(g: Graph, n: LayerIR, tid: str, dt: str) -> int:
    """Compulsory bytes of input `tid` of `n`: all of it, or for a selecting op at most
    as many elements as the op outputs."""
    elems = int(np.prod(g.tensors[tid].shape))
    if n.op_type in SELECTING:
        elems = min(elems, _elements(g, n))
    return math.ceil(elems * ITEMSIZE.get(dt, 4))


def layer_bounds(state: CompileState) -> dict[str, dict[str, Any]]:
    g = state.graph
    topo = state.topology
    hbm_bw = peaks.hbm_gbs(topo)
    lanes = peaks.vector_elems_per_ns(topo)
    plan = state.memory
    # views whose storage a lowering dropped (a fused GEMM output, a float only read
    # quantized) are views still
    dropped_views = state.tiles.views if state.tiles is not None else set()
    out: dict[str, dict[str, Any]] = {}
    for n in g.nodes:
        macs = _macs(g, n)
        peak = peaks.macs_per_ns(topo, operand_bits(n))
        compute_ns = macs / peak if macs else _elements(g, n) / lanes
        nbytes = 0
        for i, tid in enumerate(list(n.inputs) + list(n.outputs)):
            if not tid:
                continue
            tt = g.tensors[tid]
            dt = tt.dtype
            if tt.const and n.op_type in ("GEMM", "QKV_PROJ") and isinstance(n.qbits_weight,
                                                                              int):
                dt = "int4" if n.qbits_weight == 4 else "int8"
            elif tt.const and n.qbits_weight in ("fp16", "bf16"):
                dt = "fp16"
            elif tt.const and n.qbits_weight in BFP_FORMATS:  # exponents included
                dt = n.qbits_weight
            if not tt.shape:
                nbytes += 4
            elif i < len(n.inputs):
                nbytes += _input_bytes(g, n, tid, dt)
            else:
                nbytes += math.ceil(int(np.prod(tt.shape)) * ITEMSIZE.get(dt, 4))
        if plan is not None and n.op_type in ("RESHAPE", "TRANSPOSE", "IDENTITY"):
            src = plan.placements.get(n.inputs[0])
            dst = plan.placements.get(n.outputs[0])
            if src is not None and dst is not None and src.key == dst.key \
                    or n.id in dropped_views:
                nbytes, compute_ns = 0, 0.0  # a view moves nothing
        if state.folded.get(n.id):
            nbytes, compute_ns = 0, 0.0
        r = peaks.Roofline(compute_ns, nbytes / hbm_bw)
        out[n.id] = {"op_type": n.op_type, "macs": macs, "bytes": nbytes,
                     "compute_bound_ns": round(r.compute_ns, 3),
                     "memory_bound_ns": round(r.memory_ns, 3),
                     "bound_ns": round(r.bound_ns, 3), "bound_by": r.bound_by}
    _merge_fused(out, state)
    return out


def _merge_fused(out: dict[str, dict[str, Any]], state: CompileState) -> None:
    """A layer computed in another's tiles (a conv's ReLU) has no time of its own: its
    bound is added to that layer's, so the model's total bound does not shrink by fusing."""
    fused = state.tiles.fused_into if state.tiles is not None else {}
    for fid, into in sorted(fused.items()):
        f, t = out[fid], out[into]
        t["bytes"] += f["bytes"]
        for k in ("compute_bound_ns", "memory_bound_ns", "bound_ns"):
            t[k] = round(t[k] + f[k], 3)
        f["fused_into"] = into


def layer_report(bounds: dict[str, dict[str, Any]],
                 spans: dict[str, LayerSpan]) -> dict[str, Any]:
    """Merge bounds with the simulated layer spans (`common.program.LayerSpan`, from the
    stats entries or aggregated while the simulation ran)."""
    layers = {}
    for lid, b in bounds.items():
        if lid not in spans:
            continue
        s = spans[lid]
        ns = s.end_ns - s.start_ns
        busy = s.busy_ns
        eng = max(busy.items(), key=lambda kv: (kv[1], kv[0]))[0] if busy else None
        layers[lid] = dict(b, ns=round(ns, 3), busy_ns=round(s.pe_busy_ns, 3),
                           roofline_fraction=float(f"{b['bound_ns'] / ns:.6g}") if ns > 0 else 1.0,
                           bottleneck=eng)
    return layers
