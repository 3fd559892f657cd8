"""Lower ONNX nodes to primitive IR layers (one ONNX node -> zero, one or a few layers).

Nodes whose inputs are all constant are folded at import time (onnx.reference), except
the quantization ops, whose integer data the IR keeps. DequantizeLinear of a constant is
not a layer either: its output becomes a constant integer tensor with `quant` params
(the real value is dequantize(q)). Unsupported ops are collected over the whole graph
and reported together in one InputError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, QuantParams, TensorIR
from kernbench.ir.onnx_import import windows
from kernbench.ir.onnx_import.lower_extra import EXTRA_HANDLERS
from kernbench.numerics.dtypes import np_dtype, short_name

ONNX_TO_DTYPE = {
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.DOUBLE: "fp64",
    onnx.TensorProto.INT4: "int4",
    onnx.TensorProto.UINT4: "uint4",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
}
QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
MAX_FOLD_ELEMS = 1 << 26


def dtype_of_array(a: np.ndarray) -> str:
    """The IR dtype name of an array (numerics.dtypes' short spelling: float32 → fp32)."""
    try:
        return short_name(a.dtype)
    except ValueError:  # a dtype the table does not know: refused later, by name
        return a.dtype.name


def to_array(t: onnx.TensorProto) -> np.ndarray:
    """numpy array of an initializer; int4/uint4 come back in int8/uint8 containers."""
    a = numpy_helper.to_array(t)
    name = a.dtype.name
    if name in ("int4", "int2"):
        return a.astype(np.int8)
    if name in ("uint4", "uint2"):
        return a.astype(np.uint8)
    if name.startswith("float8") or name.startswith("float4"):
        raise ValueError(f"dtype {name} not supported")
    return a


class Lowering:
    """State of one import: the IR being built plus ONNX-side facts."""

    def __init__(self, model: onnx.ModelProto, *, file: str | None = None) -> None:
        self.model = model
        self.file = file
        self.opset = next(
            (int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 0
        )
        self.g = Graph()
        self.nodes: list[LayerIR] = []
        self.consts: dict[str, np.ndarray] = self.g.weights
        self.vinfo: dict[str, onnx.TypeProto] = {}
        self.alias: dict[str, str] = {}
        self.unsupported: dict[str, list[str]] = {}
        self.first_error: InputError | None = None
        self.counter = 0
        self.cur: onnx.NodeProto | None = None
        gr = model.graph
        for vi in list(gr.value_info) + list(gr.input) + list(gr.output):
            self.vinfo[vi.name] = vi.type
        for init in gr.initializer:
            try:
                self.add_const(init.name, to_array(init), dtype=ONNX_TO_DTYPE.get(init.data_type))
            except ValueError as e:
                raise InputError(str(e), file=file, where=f"initializer {init.name}") from None

    # ------------------------------------------------------------ tensors
    def name(self, n: str) -> str:
        while n in self.alias:
            n = self.alias[n]
        return n

    def is_const(self, n: str) -> bool:
        return self.name(n) in self.consts

    def const(self, n: str) -> np.ndarray | None:
        n = self.name(n)
        t = self.g.tensors.get(n)
        if n in self.consts and (t is None or t.quant is None):
            return self.consts[n]
        return None

    def add_const(self, n: str, a: np.ndarray, quant: QuantParams | None = None,
                  dtype: str | None = None) -> str:  # fmt: skip
        a = np.asarray(a)
        self.consts[n] = a
        self.g.tensors[n] = TensorIR(
            id=n,
            shape=[int(d) for d in a.shape],
            dtype=dtype or dtype_of_array(a),
            role="weight",
            const=True,
            quant=quant,
        )
        return n

    def new_name(self, base: str, suffix: str) -> str:
        self.counter += 1
        n = f"{base}:{suffix}{self.counter}"
        while n in self.g.tensors or n in self.vinfo:
            self.counter += 1
            n = f"{base}:{suffix}{self.counter}"
        return n

    def new_const(self, base: str, a: np.ndarray) -> str:
        return self.add_const(self.new_name(base, "c"), a)

    def onnx_shape(self, n: str) -> list[int] | None:
        n0 = n
        n = self.name(n)
        if n in self.g.tensors:
            return list(self.g.tensors[n].shape)
        tp = self.vinfo.get(n) or self.vinfo.get(n0)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in tp.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            else:
                return None
        return dims

    def onnx_dtype(self, n: str) -> str | None:
        n0 = n
        n = self.name(n)
        if n in self.g.tensors:
            return self.g.tensors[n].dtype
        tp = self.vinfo.get(n) or self.vinfo.get(n0)
        if tp is None or not tp.HasField("tensor_type"):
            return None
        return ONNX_TO_DTYPE.get(tp.tensor_type.elem_type)

    def shape(self, n: str) -> list[int]:
        s = self.onnx_shape(n)
        if s is None:
            raise self.error(
                f"tensor {n!r} has no static shape after shape inference "
                "(dynamic dims are not supported: export with static shapes)"
            )
        return s

    def dtype(self, n: str) -> str:
        d = self.onnx_dtype(n)
        if d is None:
            raise self.error(f"tensor {n!r} has an unsupported or unknown element type")
        return d

    def declare(self, n: str, shape: list[int] | None = None, dtype: str | None = None) -> str:
        """Make sure activation tensor `n` is in the TensorTable."""
        if n not in self.g.tensors:
            self.g.tensors[n] = TensorIR(
                id=n,
                shape=list(shape if shape is not None else self.shape(n)),
                dtype=dtype or self.dtype(n),
            )
        return n

    def error(self, reason: str) -> InputError:
        where = None
        if self.cur is not None:
            where = f"node {self.cur.name or '?'} ({self.cur.op_type})"
        return InputError(reason, file=self.file, where=where)

    # ------------------------------------------------------------ layers
    def emit(self, op_type: str, inputs: list[str], outputs: list[str],
             attributes: dict[str, Any] | None = None,
             out_shapes: list[list[int]] | None = None,
             out_dtypes: list[str] | None = None) -> LayerIR:  # fmt: skip
        ins = [self.name(i) if i else "" for i in inputs]
        for i in ins:
            if i and i not in self.g.tensors:
                self.declare(i)
        for k, o in enumerate(outputs):
            if o:
                self.declare(
                    o,
                    out_shapes[k] if out_shapes else None,
                    out_dtypes[k] if out_dtypes else None,
                )
        onnx_name = self.cur.name if self.cur is not None else ""
        node = LayerIR(
            id=f"n{len(self.nodes)}",
            op_type=op_type,
            inputs=ins,
            outputs=list(outputs),
            attributes=attributes or {},
            metadata={"layer_name": layer_name(self.cur) if self.cur is not None else "",
                      "onnx_nodes": [onnx_name] if onnx_name else []},
        )
        self.nodes.append(node)
        return node

    def tmp(self, base: str, shape: list[int], dtype: str) -> str:
        n = self.new_name(base, "t")
        self.declare(n, shape, dtype)
        return n

    # ------------------------------------------------------------ driver
    def run(self) -> Graph:
        gr = self.model.graph
        for vi in gr.input:
            if vi.name in self.consts:
                continue
            self.declare(vi.name)
            self.g.inputs.append(vi.name)
        for node in gr.node:
            self.cur = node
            self.lower_node(node)
        self.cur = None
        if self.unsupported or self.first_error is not None:
            parts = [
                f"{op} (nodes: {', '.join(names)})"
                for op, names in sorted(self.unsupported.items())
            ]
            raise InputError(
                f"unsupported ONNX op(s): {'; '.join(parts)}", file=self.file
            ) if parts else self.first_error
        produced = {o for nd in self.nodes for o in nd.outputs}
        for vi in gr.output:
            n = self.name(vi.name)
            if n != vi.name and n in produced and n not in self.g.inputs \
                    and n not in self.g.outputs:
                self._rename(n, vi.name)
                n = vi.name
            elif n != vi.name or n in self.consts:
                self.cur = None
                out = vi.name if vi.name != n else self.new_name(n, "o")
                self.emit("IDENTITY", [n], [out], {}, [self.shape(n)], [self.g.tensors[n].dtype])
                n = out
            self.g.outputs.append(n)
        self.g.nodes = self.nodes
        self.g.metadata = {
            "model_name": self.model.graph.name or "model",
            "opset_version": self.opset,
            "producer_name": self.model.producer_name,
        }
        source = next((int(p.value) for p in self.model.metadata_props
                       if p.key == "kernbench.source_opset" and p.value.isdigit()), self.opset)
        if source != self.opset:  # converted on import (ir/onnx_import/opset.py)
            self.g.metadata["source_opset"] = source
        return self.g

    def _rename(self, old: str, new: str) -> None:
        t = self.g.tensors.pop(old)
        t.id = new
        self.g.tensors[new] = t
        for nd in self.nodes:
            nd.inputs = [new if i == old else i for i in nd.inputs]
            nd.outputs = [new if o == old else o for o in nd.outputs]

    def lower_node(self, node: onnx.NodeProto) -> None:
        if node.domain not in ("", "ai.onnx"):
            self.unsupported.setdefault(f"{node.domain}.{node.op_type}", []).append(node.name)
            return
        if self.try_fold(node):
            return
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            self.unsupported.setdefault(node.op_type, []).append(node.name or "?")
            return
        try:
            handler(self, node)
        except InputError as e:
            # keep scanning so that every unsupported op is reported at once
            if self.first_error is None:
                self.first_error = e

    def try_fold(self, node: onnx.NodeProto) -> bool:
        op = node.op_type
        if op in QUANT_OPS:
            return False
        ins = [i for i in node.input if i]
        if op in ("Shape", "Size") and ins and self.onnx_shape(ins[0]) is not None:
            shape = self.onnx_shape(ins[0])
            if op == "Size":
                self.add_const(node.output[0], np.array(int(np.prod(shape)), np.int64))
                return True
            a = helper.get_attribute_value
            attrs = {x.name: a(x) for x in node.attribute}
            start, end = attrs.get("start", 0), attrs.get("end")
            self.add_const(node.output[0], np.array(shape[start:end], np.int64))
            return True
        if not all(self.const(i) is not None for i in ins):
            return False
        if op in ("Identity",) and ins:
            self.alias[node.output[0]] = self.name(ins[0])
            return True
        total = sum(int(self.const(i).size) for i in ins)
        if total > MAX_FOLD_ELEMS:
            return False
        from onnx.reference import ReferenceEvaluator

        inputs = []
        feeds = {}
        for k, i in enumerate(node.input):
            if not i:
                inputs.append("")
                continue
            nm = f"in{k}"
            arr = self.const(i)
            feeds[nm] = arr
            inputs.append(nm)
        outs = [f"out{k}" if o else "" for k, o in enumerate(node.output)]
        try:
            n2 = helper.make_node(op, inputs, outs, domain=node.domain)
            n2.attribute.extend(node.attribute)
            g = helper.make_graph(
                [n2],
                "fold",
                [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                 for k, v in feeds.items()],  # fmt: skip
                [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                 for o in outs if o],  # fmt: skip
            )
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
            m.ir_version = 9
            res = ReferenceEvaluator(m).run(None, feeds)
        except Exception:
            return False
        k = 0
        for o in node.output:
            if o:
                self.add_const(o, np.asarray(res[k]))
                k += 1
        return True


def layer_name(node: onnx.NodeProto) -> str:
    """Module path + op from the exporter's `namespace` metadata, e.g.
    ``model.model.layers.0.self_attn.q_proj/linear``; else the ONNX node name."""
    for p in node.metadata_props:
        if p.key == "namespace" and p.value:
            parts = p.value.split("/")
            leaf = parts[-1].split(":")[0].strip()
            if len(parts) >= 2:
                mod = parts[-2].split(":")[0].strip()
                return f"{mod}/{leaf}"
            return leaf
    return node.name


# ---------------------------------------------------------------- handlers
def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        out[a.name] = v
    return out


def _out(node: onnx.NodeProto, k: int = 0) -> str:
    return node.output[k] if len(node.output) > k else ""


def _in(node: onnx.NodeProto, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


UNARY = {
    "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Erf": "erf", "Tanh": "tanh",
    "Sigmoid": "sigmoid", "Exp": "exp", "Log": "log", "Abs": "abs", "Relu": "relu",
    "IsNaN": "isnan", "Not": "not", "Cos": "cos", "Sin": "sin", "Floor": "floor",
    "Ceil": "ceil",
}  # fmt: skip
BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "Equal": "equal",
    "Less": "less", "Greater": "greater", "And": "and", "Or": "or",
    "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
}  # fmt: skip


def _elementwise(lw: Lowering, node: onnx.NodeProto) -> None:
    op = node.op_type
    if op in UNARY:
        kind = UNARY[op]
    elif op in BINARY:
        kind = BINARY[op]
    elif op == "Where":
        kind = "where"
    elif op in ("Max", "Min"):
        kind = op.lower()
    else:
        kind = op.lower()
    ir_op = {"add": "ADD", "mul": "MUL"}.get(kind, "ELEMENTWISE")
    attrs = {} if ir_op != "ELEMENTWISE" else {"op": kind}
    lw.emit(ir_op, list(node.input), [node.output[0]], attrs)


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
    lw.emit("CONCAT", ins, [node.output[0]], {"axis": axis})


def _expand(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("EXPAND", [node.input[0]], [node.output[0]], {"shape": lw.shape(node.output[0])})


def _conv(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    xs, ws = lw.shape(node.input[0]), lw.shape(node.input[1])
    nsp = len(xs) - 2
    ks = list(at.get("kernel_shape", ws[2:]))
    strides = list(at.get("strides", [1] * nsp))
    dil = list(at.get("dilations", [1] * nsp))
    pads = list(at.get("pads", [0] * (2 * nsp)))
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            out = -(-xs[2 + i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (ks[i] - 1) * dil[i] + 1 - xs[2 + i])
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nsp] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    ins = [node.input[0], node.input[1]] + ([node.input[2]] if _in(node, 2) else [])
    lw.emit("CONV", ins, [node.output[0]], {
        "strides": strides, "pads": pads, "dilations": dil, "group": int(at.get("group", 1)),
        "kernel_shape": ks,
    })  # fmt: skip


def _attention(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    if len(node.output) > 3 and node.output[3]:
        raise lw.error("Attention output qk_matmul_output not supported")
    if len(node.input) > 6 and node.input[6]:
        raise lw.error("Attention input nonpad_kv_seqlen not supported")
    q, k, v = node.input[0], node.input[1], node.input[2]
    mask, pk, pv = _in(node, 3), _in(node, 4), _in(node, 5)
    qs = lw.shape(q)
    out = node.output[0]
    rank3 = len(qs) == 3
    hq = int(at.get("q_num_heads", 0) or 0)
    hkv = int(at.get("kv_num_heads", 0) or 0)

    def to4(x: str, heads: int) -> str:
        s = lw.shape(x)
        d = s[2] // heads
        r = lw.tmp(x, [s[0], s[1], heads, d], lw.dtype(x))
        lw.emit("RESHAPE", [x], [r], {"shape": [s[0], s[1], heads, d], "view": True})
        t = lw.tmp(x, [s[0], heads, s[1], d], lw.dtype(x))
        perm = [0, 2, 1, 3]
        lw.emit("TRANSPOSE", [r], [t],
                {"perm": perm, "view": transpose_is_view([s[0], s[1], heads, d], perm)})  # fmt: skip
        return t

    if rank3:
        q, k, v = to4(q, hq), to4(k, hkv), to4(v, hkv)
    else:
        hq, hkv = lw.shape(q)[1], lw.shape(k)[1]
    past = 0
    if pk:
        pks, ks = lw.shape(pk), lw.shape(k)
        past = pks[2]
        outk = _out(node, 1) or lw.tmp(out, [ks[0], ks[1], pks[2] + ks[2], ks[3]], lw.dtype(k))
        lw.emit("KV_UPDATE", [pk, k], [outk], {"axis": 2}, [[ks[0], ks[1], pks[2] + ks[2], ks[3]]],
                [lw.dtype(k)])  # fmt: skip
        k = outk
    elif _out(node, 1):
        lw.alias[_out(node, 1)] = lw.name(k)
    if pv:
        pvs, vs = lw.shape(pv), lw.shape(v)
        outv = _out(node, 2) or lw.tmp(out, [vs[0], vs[1], pvs[2] + vs[2], vs[3]], lw.dtype(v))
        lw.emit("KV_UPDATE", [pv, v], [outv], {"axis": 2}, [[vs[0], vs[1], pvs[2] + vs[2], vs[3]]],
                [lw.dtype(v)])  # fmt: skip
        v = outv
    elif _out(node, 2):
        lw.alias[_out(node, 2)] = lw.name(v)
    qs4, ks4, vs4 = lw.shape(q), lw.shape(k), lw.shape(v)
    head_dim = qs4[3]
    scale = at.get("scale")
    scale = float(scale) if scale is not None else float(1.0 / np.sqrt(head_dim))
    attrs = {
        "num_heads": hq, "num_kv_heads": hkv, "head_dim": head_dim, "scale": scale,
        "causal": bool(int(at.get("is_causal", 0))), "causal_offset": past,
        "softcap": float(at.get("softcap", 0.0) or 0.0),
        "mask": "none",
    }  # fmt: skip
    ins = [q, k, v]
    if mask:
        attrs["mask"] = "bool" if lw.dtype(mask) == "bool" else "additive"
        ins.append(mask)
    if at.get("softmax_precision") not in (None, onnx.TensorProto.FLOAT):
        raise lw.error("Attention softmax_precision other than float not supported")
    ys = [qs4[0], hq, qs4[2], vs4[3]]
    if rank3:
        t = lw.tmp(out, ys, lw.dtype(out))
        lw.emit("ATTENTION", ins, [t], attrs, [ys], [lw.dtype(out)])
        t2 = lw.tmp(out, [ys[0], ys[2], ys[1], ys[3]], lw.dtype(out))
        lw.emit("TRANSPOSE", [t], [t2], {"perm": [0, 2, 1, 3],
                "view": transpose_is_view(ys, [0, 2, 1, 3])})  # fmt: skip
        lw.emit("RESHAPE", [t2], [out], {"shape": lw.shape(out), "view": True})
    else:
        lw.emit("ATTENTION", ins, [out], attrs)
    del ks4


# ---------------------------------------------------------------- quantization ops
def _qparams(lw: Lowering, node: onnx.NodeProto, data_shape: list[int]) -> tuple[dict, bool]:
    at = _attrs(node)
    rank = len(data_shape)
    scale = node.input[1]
    ss = lw.shape(scale)
    block = int(at.get("block_size", 0) or 0)
    axis = None
    if len(ss) >= 1 and int(np.prod(ss)) != 1 or block:
        axis = int(at.get("axis", 1)) % max(rank, 1)
    return {"axis": axis, "block_size": block}, True


def _dequantize(lw: Lowering, node: onnx.NodeProto) -> None:
    x, scale, zp = node.input[0], node.input[1], _in(node, 2)
    xs = lw.shape(x)
    qp, _ = _qparams(lw, node, xs)
    xdt = lw.dtype(x)
    if xdt not in ("int8", "uint8", "int4", "uint4", "int16", "uint16", "int32"):
        raise lw.error(f"DequantizeLinear of {xdt} not supported")
    out_dt = lw.dtype(node.output[0])
    xc, sc = lw.const(x), lw.const(scale)
    zc = lw.const(zp) if zp else np.zeros((), np.int8)
    if xc is not None and sc is not None and zc is not None and xdt != "int32" and out_dt == "fp32":
        zname = lw.name(zp) if zp else None
        lw.add_const(
            node.output[0],
            xc,
            quant=QuantParams(scale=lw.name(scale), zero_point=zname, dtype=xdt, **qp),
            dtype=xdt,
        )
        return
    ins = [x, scale] + ([zp] if zp else [])
    lw.emit("DEQUANTIZE", ins, [node.output[0]], dict(qp))


def _quantize(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    x, scale, zp = node.input[0], node.input[1], _in(node, 2)
    xs = lw.shape(x)
    qp, _ = _qparams(lw, node, xs)
    out_dt = lw.dtype(node.output[0])
    if out_dt not in ("int8", "uint8", "int4", "uint4", "int16", "uint16"):
        raise lw.error(f"QuantizeLinear to {out_dt} not supported")
    if int(at.get("saturate", 1)) != 1 and out_dt.startswith("float"):
        raise lw.error("QuantizeLinear saturate=0 not supported")
    ins = [x, scale] + ([zp] if zp else [])
    lw.emit("QUANTIZE", ins, [node.output[0]], dict(qp, dtype=out_dt))


def _dyn_quant(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("DYNAMIC_QUANTIZE", [node.input[0]], list(node.output))


def _matmul_integer(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("MATMUL_INTEGER", list(node.input), [node.output[0]])


def _qlinear_matmul(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("QLINEAR_MATMUL", list(node.input), [node.output[0]])


HANDLERS: dict[str, Callable[[Lowering, onnx.NodeProto], None]] = {
    **{op: _elementwise for op in UNARY},
    **{op: _elementwise for op in BINARY},
    "Where": _elementwise,
    "Max": _elementwise,
    "Min": _elementwise,
    "Cast": _cast,
    "Identity": _identity,
    "Dropout": _dropout,
    "Constant": _constant,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "ReduceMean": _reduce,
    "ReduceSum": _reduce,
    "ReduceMax": _reduce,
    "ReduceMin": _reduce,
    **{f"Reduce{k}": _reduce for k in ("Prod", "L1", "L2", "LogSum", "LogSumExp", "SumSquare")},
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "RMSNormalization": _rmsnorm,
    "Gelu": _gelu,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Reshape": _reshape_like,
    "Squeeze": _reshape_like,
    "Unsqueeze": _reshape_like,
    "Flatten": _reshape_like,
    "Transpose": _transpose,
    "Split": _split,
    "Slice": _slice,
    "Concat": _concat,
    "Expand": _expand,
    "Conv": _conv,
    "Attention": _attention,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "DynamicQuantizeLinear": _dyn_quant,
    "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
    "MaxPool": windows.pool,
    "AveragePool": windows.pool,
    "GlobalAveragePool": windows.global_pool,
    "GlobalMaxPool": windows.global_pool,
    "CumSum": windows.cumsum,
    "Clip": windows.clip,
    **EXTRA_HANDLERS,
}

#: The ONNX op types the importer claims (docs/onnx-support.md covers each).
SUPPORTED_OPS = tuple(sorted(HANDLERS))
