"""IR verifier: structure (ids, links, DAG), tensors (producer or graph input or
constant; a known dtype), shapes consistent with each op's semantics, legal qbits, layouts
per spec §8.

`verify(graph)` raises InputError naming the node / tensor, field and reason.
`validate_ir_file(path)` loads ir.json (and weights.npz beside it, if present) and
verifies it; `kernbench validate ir.json` uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.model import DTYPES, FLOAT_QBITS, INT_QBITS, Graph, LayerIR
from kernbench.numerics.dtypes import dtype

KNOWN_OPS = frozenset({
    "GEMM", "QKV_PROJ", "ATTENTION", "KV_UPDATE", "LAYER_NORM", "RMS_NORM", "SOFTMAX", "GELU",
    "SILU", "ADD", "MUL", "ELEMENTWISE", "ROPE", "EMBEDDING", "GATHER", "GATHER_ELEMENTS",
    "GATHER_ND", "CONV", "RESHAPE", "TRANSPOSE", "SPLIT", "SLICE", "CONCAT", "EXPAND", "REDUCE",
    "MATMUL", "IDENTITY", "QUANTIZE", "DEQUANTIZE", "QDQ", "DYNAMIC_QUANTIZE", "MATMUL_INTEGER",
    "QLINEAR_MATMUL", "QLINEAR_CONV", "CONV_INTEGER",
    "POOL", "CUMSUM",
    "TILE", "PAD", "TOPK", "EINSUM", "SCATTER_ELEMENTS", "SCATTER_ND", "GROUP_NORM",
    "LOG_SOFTMAX", "HARDMAX", "TRILU", "ONE_HOT", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
})  # fmt: skip
UNARY_SAME = ("CUMSUM", "SOFTMAX", "GELU", "SILU", "RMS_NORM", "ROPE", "IDENTITY", "QDQ", "QUANTIZE",
              "DEQUANTIZE")  # fmt: skip


def validate_ir_file(path: str | Path, weights_path: str | Path | None = None) -> Graph:
    g = Graph.load(path, weights_path)
    verify(g, file=str(path))
    return g


def verify(g: Graph, *, file: str | None = None) -> Graph:
    """Check `g` against the IR spec's rules; the first problem is one InputError."""
    def err(reason: str, where: str | None = None, field: str | None = None) -> InputError:
        return InputError(reason, file=file, where=where, field=field)

    _check_tensors(g, err)
    produced = _check_nodes(g, err)
    inputs = set(g.inputs)
    for o in g.outputs:
        if o not in g.tensors:
            raise err("graph output is not in the tensor table", f"output {o}")
        if not (o in produced or o in inputs or g.tensors[o].const):
            raise err("graph output has no producer", f"output {o}")
    _check_links(g, produced, err)
    return g


def _check_tensors(g: Graph, err: Any) -> None:
    """Tensor table entries and graph inputs."""
    for key, t in g.tensors.items():
        if t.id != key:
            raise err(f"tensor key {key!r} differs from its id {t.id!r}", f"tensor {key}", "id")
        if any((not isinstance(d, int)) or d < 0 for d in t.shape):
            raise err("dims must be non-negative integers", f"tensor {key}", "shape")
        _check_qbits(t.qbits, err, f"tensor {key}", "qbits")
        _check_dtype(t.dtype, err, f"tensor {key}")
        if t.quant is not None:
            for ref in (t.quant.scale, t.quant.zero_point):
                if ref and (ref not in g.tensors or not g.tensors[ref].const):
                    raise err(f"quant parameter {ref!r} is not a constant tensor",
                              f"tensor {key}", "quant")  # fmt: skip
    for i in g.inputs:
        if i not in g.tensors:
            raise err("graph input is not in the tensor table", f"input {i}")
        if g.tensors[i].const:
            raise err("graph input is marked const", f"input {i}")


def _check_nodes(g: Graph, err: Any) -> dict[str, str]:
    """Every layer in topological order: ids, op types, bits, inputs defined before use,
    outputs written once, shapes and layouts. Returns tensor id → producing layer id."""
    inputs = set(g.inputs)
    produced: dict[str, str] = {}
    ids: set[str] = set()
    for k, n in enumerate(g.nodes):
        where = f"node {n.id}"
        if n.id in ids:
            raise err("duplicate layer id", where, "id")
        ids.add(n.id)
        if n.op_type not in KNOWN_OPS:
            raise err(f"unknown op_type {n.op_type!r}", where, "op_type")
        for f in ("qbits_weight", "qbits_activation", "qbits_kv"):
            _check_qbits(getattr(n, f), err, where, f)
        if not n.outputs:
            raise err("layer has no outputs", where, "outputs")
        for tid in n.inputs:
            if not tid:
                continue
            t = g.tensors.get(tid)
            if t is None:
                raise err(f"input tensor {tid!r} is not in the tensor table", where, "inputs")
            if not (t.const or tid in inputs or tid in produced):
                later = any(tid in m.outputs for m in g.nodes[k:])
                reason = ("input is produced by a later layer (cycle or not topologically "
                          "ordered)") if later else "input has no producer and is neither a " \
                    "graph input nor a constant"  # fmt: skip
                raise err(f"{reason}: {tid!r}", where, "inputs")
        for tid in n.outputs:
            if not tid:
                continue
            t = g.tensors.get(tid)
            if t is None:
                raise err(f"output tensor {tid!r} is not in the tensor table", where, "outputs")
            if tid in produced or tid in inputs or t.const:
                raise err(f"tensor {tid!r} is written twice (or is an input / constant)",
                          where, "outputs")  # fmt: skip
            produced[tid] = n.id
        _check_shapes(g, n, err)
        _check_layouts(g, n, err)
    return produced


def _check_links(g: Graph, produced: dict[str, str], err: Any) -> None:
    """producer / consumers fields agree with the graph; constants have their data."""
    consumers: dict[str, list[str]] = {}
    for n in g.nodes:
        for tid in n.inputs:
            if tid and n.id not in consumers.setdefault(tid, []):
                consumers[tid].append(n.id)
    for tid, t in g.tensors.items():
        if t.producer != produced.get(tid):
            raise err(f"producer is {t.producer!r}, the graph says {produced.get(tid)!r}",
                      f"tensor {tid}", "producer")  # fmt: skip
        if t.consumers != consumers.get(tid, []):
            raise err(f"consumers {t.consumers} differ from the graph's {consumers.get(tid, [])}",
                      f"tensor {tid}", "consumers")  # fmt: skip
        if t.const and g.weights:
            a = g.weights.get(tid)
            if a is None:
                raise err("constant has no data in the weights", f"tensor {tid}")
            if list(np.shape(a)) != t.shape:
                raise err(f"weights hold shape {list(np.shape(a))}, table says {t.shape}",
                          f"tensor {tid}", "shape")  # fmt: skip


def _check_dtype(name: object, err: Any, where: str) -> None:
    """An element type the numerics table knows (fp32, int8, bool, ... or a spelling of
    one), so that validate refuses what compile would."""
    try:
        dtype(name)
    except (ValueError, TypeError):
        raise err(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})", where,
                  "dtype") from None


def _check_qbits(v, err, where: str, field: str) -> None:
    if v is None or v in INT_QBITS or v in FLOAT_QBITS:
        return
    raise err(f"illegal qbits {v!r} (legal: {list(INT_QBITS)}, fp16, bf16, null)", where, field)


def _bcast(*shapes: list[int]) -> list[int] | None:
    try:
        return list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        return None


def _check_shapes(g: Graph, n: LayerIR, err) -> None:
    t = g.tensors
    where = f"node {n.id}"
    ins = [t[i].shape if i else None for i in n.inputs]
    outs = [t[o].shape if o else None for o in n.outputs]
    a = n.attributes
    op = n.op_type

    def bad(reason: str) -> InputError:
        return err(f"shape mismatch: {reason}", where, "shape")

    if op in ("GEMM", "QKV_PROJ", "ATTENTION", "KV_UPDATE"):
        _check_te_shapes(op, ins, outs, a, bad)
    elif op in ("ADD", "MUL") or (op == "ELEMENTWISE" and len(ins) >= 2
                                   and a.get("op") != "cast"):  # fmt: skip
        want = _bcast(*ins)
        if want is None or outs[0] != want:
            raise bad(f"inputs {ins} broadcast to {want}, output is {outs[0]}")
    elif op in UNARY_SAME or (op == "ELEMENTWISE" and len(ins) == 1) or op == "LAYER_NORM":
        if outs[0] != ins[0]:
            raise bad(f"output {outs[0]} != input {ins[0]}")
    elif op == "RESHAPE":
        if int(np.prod(ins[0])) != int(np.prod(outs[0])) or a.get("shape") != outs[0]:
            raise bad(f"{ins[0]} -> {outs[0]} (attribute shape {a.get('shape')})")
    elif op == "TRANSPOSE":
        perm = a.get("perm", [])
        if sorted(perm) != list(range(len(ins[0]))) or [ins[0][p] for p in perm] != outs[0]:
            raise bad(f"{ins[0]} permuted by {perm} is not {outs[0]}")
    elif op == "CONCAT":
        ax = a.get("axis", 0)
        want = list(ins[0])
        want[ax] = sum(s[ax] for s in ins)
        if outs[0] != want or any(len(s) != len(want) for s in ins):
            raise bad(f"concat of {ins} on axis {ax} is not {outs[0]}")
    elif op == "SPLIT":
        ax = a.get("axis", 0)
        if sum(a.get("sizes", [])) != ins[0][ax] or [o[ax] for o in outs] != a.get("sizes"):
            raise bad(f"split sizes {a.get('sizes')} of {ins[0]} on axis {ax}")
    elif op == "EMBEDDING":
        if len(ins[1]) != 2 or outs[0] != ins[0] + [ins[1][1]]:
            raise bad(f"ids {ins[0]} into table {ins[1]} -> {outs[0]}")
    elif op == "EXPAND" and _bcast(ins[0], outs[0]) != outs[0]:
        raise bad(f"{ins[0]} does not broadcast to {outs[0]}")


def _check_te_shapes(op: str, ins: list, outs: list, a: dict, bad: Any) -> None:
    """Shapes of the tensor-engine layers: GEMM, QKV_PROJ, ATTENTION, KV_UPDATE."""
    if op == "GEMM":
        x, w = ins[0], ins[1]
        if len(w) != 2 or not x or x[-1] != w[0]:
            raise bad(f"x {x} @ w {w} needs x[-1] == w[0] and a 2-D w [K, N]")
        if outs[0] != x[:-1] + [w[1]]:
            raise bad(f"output {outs[0]} != {x[:-1] + [w[1]]}")
        if len(ins) > 2 and ins[2] is not None and ins[2] not in ([w[1]], outs[0]):
            raise bad(f"bias {ins[2]} is not [N]={w[1]}")
    elif op == "QKV_PROJ":
        x = ins[0]
        if len(ins) not in (4, 7) or len(outs) != 3:
            raise bad("QKV_PROJ takes [x, w_q, w_k, w_v (, b_q, b_k, b_v)] -> [q, k, v]")
        for j in range(3):
            w = ins[1 + j]
            if len(w) != 2 or w[0] != x[-1] or outs[j] != x[:-1] + [w[1]]:
                raise bad(f"projection {j}: x {x} @ w {w} -> {outs[j]}")
        hq, hkv, d = a.get("num_heads"), a.get("num_kv_heads"), a.get("head_dim")
        if hq and d and (ins[1][1] != hq * d or ins[2][1] != hkv * d):
            raise bad(f"heads {hq}/{hkv} x head_dim {d} do not match N of w_q / w_k")
    elif op == "ATTENTION":
        q, k, v = ins[:3]
        hq, hkv, d = a.get("num_heads"), a.get("num_kv_heads"), a.get("head_dim")
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            raise bad("q, k, v must be rank 4 (B, H, S, D)")
        if q[1] != hq or k[1] != hkv or v[1] != hkv or not hkv or hq % hkv:
            raise bad(f"heads: q {q[1]} (num_heads {hq}), k/v {k[1]}/{v[1]} (num_kv_heads {hkv})")
        if q[3] != d or k[3] != d or k[2] != v[2] or q[0] != k[0]:
            raise bad(f"q {q}, k {k}, v {v}, head_dim {d}")
        if outs[0] != [q[0], hq, q[2], v[3]]:
            raise bad(f"output {outs[0]} != {[q[0], hq, q[2], v[3]]}")
        if len(ins) > 3 and ins[3] is not None and _bcast(ins[3], [q[0], hq, q[2], ins[3][-1]]) \
                is None:  # fmt: skip
            raise bad(f"mask {ins[3]} does not broadcast to {[q[0], hq, q[2], k[2]]}")
    elif op == "KV_UPDATE":
        past, new = ins[0], ins[1]
        ax = a.get("axis", 2)
        want = list(new)
        if len(past) != len(new):
            raise bad(f"past {past} and new {new} ranks differ")
        want[ax] = past[ax] + new[ax]
        if outs[0] != want:
            raise bad(f"output {outs[0]} != {want}")


def _check_layouts(g: Graph, n: LayerIR, err) -> None:
    """Spec §8: GEMM (M, K) x (K, N); attention Q/K/V and the KV cache (B, H, S, D)."""
    where = f"node {n.id}"
    if n.op_type == "GEMM":
        w = g.tensors[n.inputs[1]]
        if w.const and w.layout not in (None, "KN"):
            raise err(f"GEMM weight layout {w.layout!r}, expected 'KN'", where, "layout")
    if n.op_type in ("ATTENTION", "KV_UPDATE"):
        tids = n.inputs[:3] if n.op_type == "ATTENTION" else n.inputs[:2] + n.outputs[:1]
        for tid in tids:
            t = g.tensors[tid]
            if len(t.shape) != 4 or t.layout not in (None, "BHSD"):
                raise err(f"tensor {tid!r} must be rank 4 with layout BHSD (spec §8), "
                          f"got {t.shape} {t.layout!r}", where, "layout")  # fmt: skip
