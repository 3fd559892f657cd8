"""LLM figures: what one simulated step means in tokens, bytes and HBM capacity.

`llm_facts(graph)` reads any graph with ATTENTION layers (a config.json model, a built-in,
an ONNX export): batch, new tokens and cached tokens from the attention shapes, weight
bytes at their stored bitwidth (tied tensors once), KV-cache bytes at the KV bitwidth and
the MACs of the step. `check_fit` refuses (exit 2) a model whose weights + KV cache exceed
the topology's HBM and warns above 90 %. `llm_section(facts, stats, topo)` is the `llm`
section of stats.json (documented in docs/stats.md): time to first token (prefill) or time
per output token (decode), tokens/s × batch, the run's bottleneck and bound verdict (copied
from stats.json's `bottleneck`), the whole-step roofline bound with the fractions of it and
of the peak HBM bandwidth and MAC rate reached, and the fit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kernbench.compiler.hbm import HbmFullError
from kernbench.compiler.roofline import operand_bits
from kernbench.host.moe_stats import idle_weights
from kernbench.ir.model import Graph, QBits
from kernbench.numerics.block_float import FORMATS as BFP_FORMATS
from kernbench.topology.model import Topology
from kernbench.topology.peaks import macs_per_ns, peak_figures

#: fraction of HBM above which the fit is reported as a warning
HBM_WARN_FRACTION = 0.9
_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "int8": 8, "uint8": 8, "int4": 4, "int32": 32,
         "int64": 64, "bool": 8, "int16": 16}
_TE = ("GEMM", "QKV_PROJ")


@dataclass(frozen=True)
class LlmFacts:
    """One step of an LLM, from its IR."""

    model: str
    phase: str            # "prefill" | "decode"
    layers: int           # ATTENTION layers
    batch: int
    seq_len: int          # new tokens per sequence
    kv_len: int           # cached tokens per sequence before the step
    params: int           # weight parameters (tied once)
    weight_bytes: int     # at the stored bitwidth
    kv_cache_bytes: int   # the cache after the step, at the KV bitwidth
    # what the step must read at least: every weight once, but of a table only ever looked
    # up (EMBEDDING) just the rows gathered, plus the KV cache
    step_read_bytes: int
    macs: int             # multiply-accumulates of the step (TE layers)
    # (operand bits, MACs at them): each layer's MACs at its widest operand's width, which
    # sets the array's peak (compiler.roofline.operand_bits); not a stats.json field
    macs_by_bits: tuple[tuple[int, int], ...] = ()


def _bits(q: QBits, dtype: str) -> float:
    if isinstance(q, int):
        return q
    if q in ("fp16", "bf16"):
        return 16
    if q in BFP_FORMATS:  # the shared exponents included: 8.5 / 4.5 bits
        return BFP_FORMATS[q].bytes_per_element * 8
    return _BITS.get(dtype, 32)


def llm_facts(g: Graph) -> LlmFacts | None:
    """The facts of an LLM step, or None when the graph has no ATTENTION layer."""
    atts = [n for n in g.nodes if n.op_type == "ATTENTION"]
    if not atts:
        return None
    t = g.tensors
    q0, k0 = t[atts[0].inputs[0]].shape, t[atts[0].inputs[1]].shape
    batch, seq = q0[0], q0[2]
    kv_len = max(0, k0[2] - seq)
    tied_map = g.metadata.get("tied_weights") or {}
    tied = set(tied_map.keys())
    wbits: dict[str, float] = {}
    for n in g.nodes:
        for i, tid in enumerate(n.inputs):
            tt = t.get(tid) if tid else None
            if tt is None or not tt.const or tt.role != "weight" or tid in tied:
                continue
            if tid.startswith("rope.") or (n.op_type == "ATTENTION" and i >= 3):
                continue  # rotary tables and masks are derived, not parameters
            w = n.qbits_weight if n.op_type in _TE and i in (1, 2, 3) else None
            wbits[tid] = max(wbits.get(tid, 0), _bits(w, tt.dtype))
    expert_bits = max((b for k, b in wbits.items() if ".experts." in k), default=0.0)
    for tid in idle_weights(g):  # experts no token chose still sit in HBM
        wbits.setdefault(tid, expert_bits or _bits(None, t[tid].dtype))
    params = sum(math.prod(t[k].shape) for k in wbits)
    wbytes = sum(math.ceil(math.prod(t[k].shape) * b / 8) for k, b in wbits.items())
    kv_bytes = 0
    for n in atts:
        kb = _bits(n.qbits_kv, t[n.inputs[1]].dtype)
        kv_bytes += sum(math.ceil(math.prod(t[i].shape) * kb / 8) for i in n.inputs[1:3])
    lookup_rows = _lookup_rows(g, set(tied_map.values()))
    read = sum(math.ceil(min(lookup_rows[k], t[k].shape[0]) * math.prod(t[k].shape[1:]) * b / 8)
               if k in lookup_rows else math.ceil(math.prod(t[k].shape) * b / 8)
               for k, b in wbits.items())
    by_bits = _macs(g)
    return LlmFacts(model=str(g.metadata.get("model_name", "model")),
                    phase="decode" if kv_len > 0 else "prefill", layers=len(atts),
                    batch=batch, seq_len=seq, kv_len=kv_len, params=params,
                    weight_bytes=wbytes, kv_cache_bytes=kv_bytes,
                    step_read_bytes=read + kv_bytes, macs=sum(by_bits.values()),
                    macs_by_bits=tuple(sorted(by_bits.items())))


def _lookup_rows(g: Graph, tied_targets: set[str]) -> dict[str, int]:
    """Tables only ever looked up (every consumer an EMBEDDING, none an LM head's tied
    weight) → the rows the step gathers (its ids' count; a row gathered twice is read once at
    most, the table's rows bound it)."""
    rows: dict[str, int] = {}
    other: set[str] = set(tied_targets)
    for n in g.nodes:
        for i, tid in enumerate(n.inputs):
            if n.op_type == "EMBEDDING" and i == 1:
                rows[tid] = rows.get(tid, 0) + math.prod(g.tensors[n.inputs[0]].shape)
            elif tid:
                other.add(tid)
    return {k: r for k, r in rows.items() if k not in other}


def _macs(g: Graph) -> dict[int, int]:
    """The step's MACs by the operand bits of the layer doing them."""
    t = g.tensors
    out: dict[int, int] = {}
    for n in g.nodes:
        if n.op_type == "GEMM":
            x, w = t[n.inputs[0]].shape, t[n.inputs[1]].shape
            m = math.prod(x[:-1]) * w[0] * w[1]
        elif n.op_type == "QKV_PROJ":
            x = t[n.inputs[0]].shape
            m = sum(math.prod(x[:-1]) * x[-1] * t[w].shape[-1] for w in n.inputs[1:4])
        elif n.op_type == "ATTENTION":
            q, k, v = (t[i].shape for i in n.inputs[:3])
            m = math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1])
        else:
            continue
        bits = operand_bits(n)
        out[bits] = out.get(bits, 0) + m
    return out


def _binary(n: int) -> str:
    """Bytes in GiB, or in MiB below one GiB (a small model's weights are not 0.00 GiB)."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def check_fit(f: LlmFacts, topo: Topology) -> list[str]:
    """Refuse (HbmFullError, an InputError) when weights + KV cache exceed HBM; warnings
    above 90 %."""
    cap = topo.hbm_bytes
    need = f.weight_bytes + f.kv_cache_bytes
    if need > cap:
        raise HbmFullError(f"weights {_binary(f.weight_bytes)} + KV cache "
                           f"{_binary(f.kv_cache_bytes)} = {_binary(need)} do not fit the "
                           f"{_binary(cap)} of HBM of '{topo.name}'",
                           where=f"model '{f.model}'")
    if need > HBM_WARN_FRACTION * cap:
        return [f"weights + KV cache use {100 * need / cap:.0f}% of HBM "
                f"({_binary(need)} of {_binary(cap)}): little room for activations"]
    return []


def peak_name(bits: int) -> str:
    """The name of the array's peak at `bits`-bit operands: int4, int8, 16-bit (int16, fp16
    and bf16 share it), fp32."""
    return {4: "int4", 8: "int8", 32: "fp32"}.get(bits, f"{bits}-bit")


def llm_section(f: LlmFacts, stats: dict[str, Any], topo: Topology) -> dict[str, Any]:
    """stats.json's `llm` section (schema in docs/stats.md)."""
    p = peak_figures(topo)
    total = float(stats["total_ns"])
    tokens = f.batch * f.seq_len
    tps = tokens / (total * 1e-9) if total > 0 else 0.0
    # whole-step roofline: every layer's MACs at the peak of its operands' width, weights
    # and the cache read once (of a lookup table, the rows gathered)
    compute_ns = sum(m / macs_per_ns(topo, bits) for bits, m in f.macs_by_bits)
    memory_ns = f.step_read_bytes / p.hbm_gbs
    bound = max(compute_ns, memory_ns)
    cap = topo.hbm_bytes
    need = f.weight_bytes + f.kv_cache_bytes
    b = stats.get("bottleneck", {})
    out: dict[str, Any] = dict(asdict(f))
    del out["macs_by_bits"]
    out.update({
        "tokens": tokens,
        "step_ns": round(total, 3),
        "ttft_ns": round(total, 3) if f.phase == "prefill" else None,
        "tpot_ns": round(total / f.seq_len, 3) if f.phase == "decode" else None,
        "prefill_tokens_per_s": round(tps, 3) if f.phase == "prefill" else None,
        "decode_tokens_per_s": round(tps, 3) if f.phase == "decode" else None,
        # the run's verdict, from its bottleneck (report.verdict): one source for both
        "bottleneck": {"component": b.get("component"), "kind": b.get("kind"),
                       "utilization": b.get("utilization"), "bound_by": b.get("bound_by")},
        "roofline": {"compute_bound_ns": round(compute_ns, 3),
                     "memory_bound_ns": round(memory_ns, 3), "bound_ns": round(bound, 3),
                     "bound_by": "compute" if compute_ns >= memory_ns else "memory",
                     "peaks": [peak_name(bits) for bits, m in f.macs_by_bits if m],
                     "fraction": round(bound / total, 6) if total > 0 else 0.0,
                     "hbm_bandwidth_fraction": round(memory_ns / total, 6) if total > 0 else 0.0,
                     "mac_rate_fraction": round(compute_ns / total, 6) if total > 0 else 0.0},
        "hbm": {"capacity_bytes": cap, "needed_bytes": need,
                "fraction": round(need / cap, 6), "fits": need <= cap,
                "warning": need > HBM_WARN_FRACTION * cap},
    })
    return out
