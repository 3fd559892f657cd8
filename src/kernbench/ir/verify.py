"""IR verifier: structure (ids, links, DAG), tensors (producer or graph input or
constant; a known dtype), each node against its op class's declarations (inputs and
outputs counted, each of an element type and rank its declaration allows, every
attribute present when required, of its type and allowed values, none the op does not
declare; the attributes agreeing with each other and the tensors' ranks), shapes
consistent with each op's semantics, legal qbits,
layouts per spec §8.

`verify(graph)` raises InputError naming the node / tensor, field and reason.
`validate_ir_file(path)` loads ir.json (and weights.npz beside it, if present) and
verifies it; `kernbench validate ir.json` uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.model import BFP_QBITS, DTYPES, FLOAT_QBITS, INT_QBITS, Graph, LayerIR
from kernbench.ir.ops import OPS, OpRuleError, ShapeMismatch
from kernbench.numerics.dtypes import dtype

#: builds the InputError of one problem: (reason, where, field)
ErrFn = Callable[..., InputError]
#: every IR op type: one class each in `kernbench.ir.ops`
KNOWN_OPS = frozenset(OPS)


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


def _check_tensors(g: Graph, err: ErrFn) -> None:
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


def _check_nodes(g: Graph, err: ErrFn) -> dict[str, str]:
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
        _check_declared(g, n, err)
        _check_shapes(g, n, err)
        _check_layouts(g, n, err)
    return produced


def _check_links(g: Graph, produced: dict[str, str], err: ErrFn) -> None:
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


def _check_dtype(name: object, err: ErrFn, where: str) -> None:
    """An element type the numerics table knows (fp32, int8, bool, ... or a spelling of
    one), so that validate refuses what compile would."""
    try:
        dtype(name)
    except (ValueError, TypeError):
        raise err(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})", where,
                  "dtype") from None


def _check_qbits(v, err, where: str, field: str) -> None:
    if v is None or v in INT_QBITS or v in FLOAT_QBITS or field in ("qbits_weight", "qbits") \
            and v in BFP_QBITS:
        return
    raise err(f"illegal qbits {v!r} (legal: {list(INT_QBITS)}, fp16, bf16, null; "
              "bfp8_b / bfp4_b for weights)", where, field)


def _check_declared(g: Graph, n: LayerIR, err: ErrFn) -> None:
    """The node's inputs, outputs and attributes against its op class's declarations
    (`IrOp.check_node`, then `check_types`): the field is `inputs`, `outputs`,
    `inputs.<name>`, `outputs.<name>` or `attributes.<name>`."""
    try:
        OPS[n.op_type].check_node(n)
        OPS[n.op_type].check_types(n, g.tensors)
    except OpRuleError as e:
        raise err(str(e), f"node {n.id}", e.field) from None


def _check_shapes(g: Graph, n: LayerIR, err: ErrFn) -> None:
    """The op's attributes against each other and its tensors (`IrOp.constraints`), then
    its own rule (`IrOp.check_shapes`) on the node's tensor shapes."""
    t = g.tensors
    op = OPS[n.op_type]
    try:
        op.constraints(op.attrs(n), [t[i] if i else None for i in n.inputs],
                       [t[o] if o else None for o in n.outputs])
        op.check_shapes(n, [t[i].shape if i else None for i in n.inputs],
                        [t[o].shape if o else None for o in n.outputs])
    except ShapeMismatch as e:
        raise err(f"shape mismatch: {e}", f"node {n.id}", "shape") from None
    except OpRuleError as e:
        raise err(str(e), f"node {n.id}", e.field) from None


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
