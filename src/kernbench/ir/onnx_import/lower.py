"""Lower ONNX nodes to primitive IR layers (one ONNX node -> zero, one or a few layers).

Nodes whose inputs are all constant are folded at import time (onnx.reference), except
the quantization ops, whose integer data the IR keeps. DequantizeLinear of a constant is
not a layer either: its output becomes a constant integer tensor with `quant` params
(the real value is dequantize(q)). Unsupported ops are collected over the whole graph
and reported together in one InputError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, QuantParams, TensorIR
from kernbench.ir.onnx_import.node_shapes import infer_node_outputs, needs_inference
from kernbench.ir.onnx_import.onnx_util import (
    MAX_FOLD_ELEMS,
    ONNX_TO_DTYPE,
    QUANT_OPS,
    dtype_of_array,
    layer_name,
    to_array,
)

#: an ONNX op handler: emits the IR layers of one node into the import state
Handler = Callable[["Lowering", onnx.NodeProto], None]


class Lowering:
    """State of one import: the IR being built plus ONNX-side facts."""

    def __init__(self, model: onnx.ModelProto, handlers: Mapping[str, Handler], *,
                 file: str | None = None,
                 arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """`arrays`: initializers read in place (`detached`), their raw_data not in `model`."""
        self.model = model
        self.handlers = handlers  # ONNX op type → the handler that emits its layers
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
        arrays = arrays or {}
        for init in gr.initializer:
            try:
                a = arrays.get(init.name)
                self.add_const(init.name, to_array(init) if a is None else a,
                               dtype=ONNX_TO_DTYPE.get(init.data_type))
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
        if needs_inference(self, node):  # shapes computed from values folded here
            infer_node_outputs(self, node)
        handler = self.handlers.get(node.op_type)
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
