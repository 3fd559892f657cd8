"""Handlers of the basic ONNX ops: elementwise, casts, reductions, norms, gathers and
shape / layout ops. Each takes the import state and one node and emits IR layers."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from kernbench.ir.onnx_import.lower import Lowering
from kernbench.ir.onnx_import.onnx_util import (
    ONNX_TO_DTYPE,
    _attrs,
    _in,
)
from kernbench.ir.ops import BY_ONNX
from kernbench.numerics.dtypes import np_dtype


def _elementwise(lw: Lowering, node: onnx.NodeProto) -> None:
    """An ONNX elementwise op as its ELEMENTWISE kind (`kernbench.ir.ops.elementwise`):
    ADD / MUL layers for Add / Mul, else an ELEMENTWISE layer naming the kind, with the
    ONNX attributes its kernel takes."""
    kind = BY_ONNX[node.op_type]
    attrs: dict[str, Any] = {}
    if kind.ir_op == "ELEMENTWISE":
        at = _attrs(node)
        attrs = {"op": kind.kind, **{a.name: at[a.name] for a in kind.onnx_attrs if a.name in at}}
    lw.emit(kind.ir_op, [i for i in node.input if i], [node.output[0]], attrs)


def _cast(lw: Lowering, node: onnx.NodeProto) -> None:
    to = ONNX_TO_DTYPE.get(_attrs(node)["to"])
    if to is None:
        raise lw.error(f"Cast to element type {_attrs(node)['to']} not supported")
    src = lw.dtype(node.input[0])
    if src == to:
        lw.alias[node.output[0]] = lw.name(node.input[0])
        return
    lw.emit("ELEMENTWISE", [node.input[0]], [node.output[0]], {"op": "cast", "to": to})


def _identity(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.alias[node.output[0]] = lw.name(node.input[0])


def _dropout(lw: Lowering, node: onnx.NodeProto) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise lw.error("Dropout mask output not supported")
    if len(node.input) > 2 and node.input[2]:
        tm = lw.const(node.input[2])
        if tm is None or bool(tm):
            raise lw.error("Dropout in training mode not supported")
    lw.alias[node.output[0]] = lw.name(node.input[0])


def _constant(lw: Lowering, node: onnx.NodeProto) -> None:  # folded normally
    raise lw.error("Constant could not be evaluated")


def _matmul(lw: Lowering, node: onnx.NodeProto) -> None:
    a, b = node.input[0], node.input[1]
    bt = lw.g.tensors.get(lw.name(b))
    if bt is not None and bt.const and len(bt.shape) == 2 and len(lw.shape(a)) >= 1:
        lw.emit("GEMM", [a, b], [node.output[0]])
    else:
        lw.emit("MATMUL", [a, b], [node.output[0]])


def _gemm(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    ta, tb = int(at.get("transA", 0)), int(at.get("transB", 0))
    a, b = node.input[0], node.input[1]
    c = _in(node, 2)
    out = node.output[0]
    m_, n_ = lw.shape(out)
    dt = lw.dtype(out)
    if ta:
        sa = lw.shape(a)
        t = lw.tmp(out, [sa[1], sa[0]], lw.dtype(a))
        lw.emit("TRANSPOSE", [a], [t], {"perm": [1, 0], "view": False})
        a = t
    bc = lw.const(b)
    if bc is not None:
        w = np.ascontiguousarray(bc.T if tb else bc)
        if alpha != 1.0:
            w = (w * np.asarray(alpha, dtype=w.dtype)).astype(w.dtype)
        if tb or alpha != 1.0:
            b = lw.new_const(lw.name(b), w)
    else:
        if tb:
            sb = lw.shape(b)
            t = lw.tmp(out, [sb[1], sb[0]], lw.dtype(b))
            lw.emit("TRANSPOSE", [b], [t], {"perm": [1, 0], "view": False})
            b = t
        if alpha != 1.0:
            s = lw.new_const(out, np.asarray(alpha, dtype=np_dtype(dt)))
            t = lw.tmp(out, lw.shape(b), dt)
            lw.emit("MUL", [b, s], [t])
            b = t
    bias = ""
    if c:
        cc = lw.const(c)
        if cc is not None:
            cv = cc * np.asarray(beta, dtype=cc.dtype) if beta != 1.0 else cc
            if cv.size in (1, n_) and (cv.ndim <= 1 or cv.shape[-1] == cv.size):
                if cv.ndim == 1 and cv.size == n_ and beta == 1.0:
                    bias = lw.name(c)
                else:
                    vec = np.broadcast_to(cv.reshape(-1), (n_,)).astype(cc.dtype)
                    bias = lw.new_const(lw.name(c), np.ascontiguousarray(vec))
            else:
                full = np.broadcast_to(cv, (m_, n_)).astype(cc.dtype)
                bias = lw.new_const(lw.name(c), np.ascontiguousarray(full))
        else:
            if beta != 1.0:
                s = lw.new_const(out, np.asarray(beta, dtype=np_dtype(dt)))
                t = lw.tmp(out, lw.shape(c), dt)
                lw.emit("MUL", [c, s], [t])
                c = t
            bias = c
    bt = lw.g.tensors.get(lw.name(b))
    op = "GEMM" if bt is not None and bt.const else "MATMUL"
    if op == "GEMM" or not bias:
        lw.emit(op, [a, b] + ([bias] if bias else []), [out])
    else:
        t = lw.tmp(out, [m_, n_], dt)
        lw.emit("MATMUL", [a, b], [t])
        lw.emit("ADD", [t, bias], [out])


def _reduce(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    kind = node.op_type[len("Reduce"):].lower()
    axes = at.get("axes")
    if len(node.input) > 1 and node.input[1]:
        ac = lw.const(node.input[1])
        if ac is None:
            raise lw.error("non-constant 'axes' input not supported")
        axes = [int(x) for x in ac.reshape(-1)]
    keep = int(at.get("keepdims", 1))
    noop = int(at.get("noop_with_empty_axes", 0))
    rank = len(lw.shape(node.input[0]))
    if not axes:
        if noop:
            lw.alias[node.output[0]] = lw.name(node.input[0])
            return
        axes = list(range(rank))
    axes = sorted(int(a) % rank for a in axes) if rank else []
    lw.emit("REDUCE", [node.input[0]], [node.output[0]],
            {"op": kind, "axes": axes, "keepdims": bool(keep)})  # fmt: skip


def _softmax(lw: Lowering, node: onnx.NodeProto) -> None:
    rank = len(lw.shape(node.input[0]))
    axis = int(_attrs(node).get("axis", -1)) % max(rank, 1)
    lw.emit("SOFTMAX", [node.input[0]], [node.output[0]], {"axis": axis})


def _layernorm(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    rank = len(lw.shape(node.input[0]))
    axis = int(at.get("axis", -1)) % rank
    eps = float(at.get("epsilon", 1e-5))
    ins = [node.input[0], node.input[1], _in(node, 2)]
    if not ins[2]:
        ins = ins[:2]
    outs = [o for o in node.output]
    shapes = [lw.shape(node.output[0])]
    dts = [lw.dtype(node.output[0])]
    for o in outs[1:]:
        if o:
            shapes.append(lw.shape(node.input[0])[:axis] + [1] * (rank - axis))
            dts.append(lw.dtype(o) if lw.onnx_dtype(o) else "fp32")
        else:
            shapes.append([])
            dts.append("fp32")
    lw.emit("LAYER_NORM", ins, outs, {"axis": axis, "eps": eps}, shapes, dts)


def _rmsnorm(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    rank = len(lw.shape(node.input[0]))
    axis = int(at.get("axis", -1)) % rank
    eps = float(at.get("epsilon", 1e-5))
    lw.emit("RMS_NORM", [node.input[0], node.input[1]], [node.output[0]],
            {"axis": axis, "eps": eps})  # fmt: skip


def _gelu(lw: Lowering, node: onnx.NodeProto) -> None:
    approx = _attrs(node).get("approximate", "none")
    lw.emit("GELU", [node.input[0]], [node.output[0]], {"approximate": approx})


def _gather(lw: Lowering, node: onnx.NodeProto) -> None:
    axis = int(_attrs(node).get("axis", 0))
    data, idx = node.input[0], node.input[1]
    rank = len(lw.shape(data))
    axis %= rank
    dt = lw.g.tensors.get(lw.name(data))
    if axis == 0 and rank == 2 and dt is not None and dt.const:
        lw.emit("EMBEDDING", [idx, data], [node.output[0]])
    else:
        lw.emit("GATHER", [data, idx], [node.output[0]], {"axis": axis})


def _gather_elements(lw: Lowering, node: onnx.NodeProto) -> None:
    rank = len(lw.shape(node.input[0]))
    axis = int(_attrs(node).get("axis", 0)) % rank
    lw.emit("GATHER_ELEMENTS", [node.input[0], node.input[1]], [node.output[0]], {"axis": axis})


def _gather_nd(lw: Lowering, node: onnx.NodeProto) -> None:
    bd = int(_attrs(node).get("batch_dims", 0))
    lw.emit("GATHER_ND", [node.input[0], node.input[1]], [node.output[0]], {"batch_dims": bd})


def _reshape_like(lw: Lowering, node: onnx.NodeProto) -> None:
    out = node.output[0]
    shape = lw.shape(out)
    if node.op_type == "Reshape" and int(_attrs(node).get("allowzero", 0)):
        sc = lw.const(node.input[1])
        if sc is not None and 0 in sc.tolist() and 0 not in lw.shape(node.input[0]):
            raise lw.error("Reshape allowzero with a zero dim not supported")
    lw.emit("RESHAPE", [node.input[0]], [out], {"shape": shape, "view": True})


def transpose_is_view(shape: list[int], perm: list[int]) -> bool:
    """A transpose is a view when it only moves size-1 axes (memory order unchanged)."""
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def _transpose(lw: Lowering, node: onnx.NodeProto) -> None:
    shape = lw.shape(node.input[0])
    perm = _attrs(node).get("perm")
    perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
    lw.emit("TRANSPOSE", [node.input[0]], [node.output[0]],
            {"perm": perm, "view": transpose_is_view(shape, perm)})  # fmt: skip


def _split(lw: Lowering, node: onnx.NodeProto) -> None:
    rank = len(lw.shape(node.input[0]))
    axis = int(_attrs(node).get("axis", 0)) % rank
    sizes = [lw.shape(o)[axis] for o in node.output]
    lw.emit("SPLIT", [node.input[0]], list(node.output), {"axis": axis, "sizes": sizes})


def _slice(lw: Lowering, node: onnx.NodeProto) -> None:
    shape = lw.shape(node.input[0])
    vals = []
    for k in range(1, 5):
        n = _in(node, k)
        if not n:
            vals.append(None)
            continue
        c = lw.const(n)
        if c is None:
            raise lw.error("non-constant Slice starts/ends/axes/steps not supported")
        vals.append([int(x) for x in c.reshape(-1)])
    starts, ends, axes, steps = vals
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    st, en, sp = [0] * rank, list(shape), [1] * rank
    for a, s, e, p in zip(axes, starts, ends, steps, strict=True):
        d = shape[a]
        if p == 0:
            raise lw.error("Slice step 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if p > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        st[a], en[a], sp[a] = s, e, p
    lw.emit("SLICE", [node.input[0]], [node.output[0]], {"starts": st, "ends": en, "steps": sp})


def _concat(lw: Lowering, node: onnx.NodeProto) -> None:
    rank = len(lw.shape(node.output[0]))
    axis = int(_attrs(node)["axis"]) % rank
    ins = [i for i in node.input if i and 0 not in lw.shape(i)] or [node.input[0]]
    if len(ins) == 1:
        # one input left (an empty past KV cache at a prefill, or an exporter's one-input
        # Concat): the output is that input, and the fusions see its producer directly
        lw.alias[node.output[0]] = lw.name(ins[0])
        return
    lw.emit("CONCAT", ins, [node.output[0]], {"axis": axis})


def _expand(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("EXPAND", [node.input[0]], [node.output[0]], {"shape": lw.shape(node.output[0])})
