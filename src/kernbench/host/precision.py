"""The precision a run used (stats.json `precision`, the summary's precision line), read
from the compiled IR: each layer's `qbits_weight`, `qbits_activation` and `qbits_kv`,
as the QConfig (or its defaults, or the quantized model) set them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text
from kernbench.ir.model import Graph, LayerIR, QBits
from kernbench.ir.qconfig import KV_OPS, TE_OPS, WEIGHT_OPS, QConfig
from kernbench.numerics.dtypes import short_name
from kernbench.report.stats import Precision, Stats, set_precision

_FIELDS = ("weight", "activation", "kv")


def width_name(q: QBits, dtype: str) -> str:
    """`int8` for 8 bits, `fp16` / `bf16` as named; no quantization: the tensor's dtype."""
    if isinstance(q, int):
        return f"int{q}"
    if q is not None:
        return str(q)
    try:
        return short_name(dtype)
    except ValueError:
        return dtype


def _widths(g: Graph, n: LayerIR) -> dict[str, str]:
    """The widths that apply to layer `n`: its weight (GEMM-like layers), the activation
    entering the tensor engine (TE layers), its KV cache (ATTENTION, KV_UPDATE)."""
    t = g.tensors
    out: dict[str, str] = {}
    if n.op_type in WEIGHT_OPS and len(n.inputs) > 1 and n.inputs[1] in t:
        out["weight"] = width_name(n.qbits_weight, t[n.inputs[1]].dtype)
    if n.op_type in TE_OPS and n.inputs and n.inputs[0] in t:
        out["activation"] = width_name(n.qbits_activation, t[n.inputs[0]].dtype)
    if n.op_type in KV_OPS and len(n.inputs) > 1 and n.inputs[1] in t:
        out["kv"] = width_name(n.qbits_kv, t[n.inputs[1]].dtype)
    return out


def run_precision(g: Graph) -> Precision:
    """Count the layers at each width per operand class; list the layers off the most
    common width of a class (sorted ids)."""
    per_layer = {n.id: _widths(g, n) for n in g.nodes}
    counts: dict[str, Counter[str]] = {f: Counter() for f in _FIELDS}
    for w in per_layer.values():
        for f, name in w.items():
            counts[f][name] += 1
    common = {f: max(sorted(c), key=lambda k, c=c: c[k]) for f, c in counts.items() if c}
    minority: dict[str, dict[str, str]] = {}
    for lid in sorted(per_layer):
        off = {f: v for f, v in per_layer[lid].items() if v != common[f]}
        if off:
            minority[lid] = off
    qfile = g.metadata.get("qconfig_file")
    if qfile or g.qconfig is not None and g.qconfig != QConfig().model_dump(mode="json"):
        source = "qconfig"
    elif any(n.metadata.get("imported_qbits") for n in g.nodes):
        source = "model"
    else:
        source = "defaults"
    return Precision(source, *(dict(sorted(counts[f].items())) for f in _FIELDS), minority,
                     qfile if isinstance(qfile, str) else None)


def add_precision(stats: Stats, ir_file: Path) -> None:
    """The widths the bundle's IR runs at (host.precision), when the bundle has its IR."""
    if ir_file.exists():
        try:
            graph = Graph.from_dict(json.loads(read_input_text(ir_file, MAX_JSON_BYTES)),
                                    file=str(ir_file))
        except ValueError as e:
            raise InputError(f"unreadable: {e}", file=str(ir_file)) from None
        set_precision(stats, run_precision(graph))
