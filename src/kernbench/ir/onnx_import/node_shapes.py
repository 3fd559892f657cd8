"""Output shapes of a node whose shapes ONNX's whole-graph inference left symbolic.

A model exported with dynamic shapes computes its shapes at run time (Shape, Gather,
Concat, Range, Where, ...). Once its input dims are bound, every such computation has
constant inputs and the importer folds it (`Lowering.try_fold`), but ONNX's data
propagation covers only a few ops (not Range, Where, GatherND, ...), so a tensor computed
from a folded value can still lack a static shape. Before lowering such a node, its output
types are inferred again from one-node graph: each input with the static shape the
importer knows now, and each small constant input with its value (so that Reshape /
Expand / Range / ... see their shape operands). Nothing here is specific to one export:
the rule is ONNX's own shape inference, run on facts known after folding.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernbench.ir.onnx_import.onnx_util import ONNX_TO_DTYPE

#: constants up to this many elements go into the one-node graph with their values
MAX_VALUE_ELEMS = 1 << 16
DTYPE_TO_ONNX = {v: k for k, v in ONNX_TO_DTYPE.items()}


def _elem_type(lw, name: str) -> int:  # noqa: ANN001 (the importer's Lowering)
    tp = lw.vinfo.get(name) or lw.vinfo.get(lw.name(name))
    if tp is not None and tp.HasField("tensor_type") and tp.tensor_type.elem_type:
        return int(tp.tensor_type.elem_type)
    t = lw.g.tensors.get(lw.name(name))
    if t is not None and t.quant is not None:
        return onnx.TensorProto.FLOAT  # a dequantized constant: ONNX sees its real value
    return DTYPE_TO_ONNX.get(t.dtype if t is not None else "", onnx.TensorProto.UNDEFINED)


def needs_inference(lw, node: onnx.NodeProto) -> bool:  # noqa: ANN001
    """Some output of `node` has no static shape yet."""
    return any(o and lw.onnx_shape(o) is None for o in node.output)


def infer_node_outputs(lw, node: onnx.NodeProto) -> None:  # noqa: ANN001
    """Record in `lw.vinfo` the output types of `node` that come out fully static."""
    inputs, inits, seen = [], [], set()
    for i in node.input:
        if not i or i in seen:
            continue
        seen.add(i)
        value = lw.const(i)
        if value is not None and np.asarray(value).size <= MAX_VALUE_ELEMS:
            inits.append(numpy_helper.from_array(np.asarray(value), i))
            continue
        inputs.append(helper.make_tensor_value_info(i, _elem_type(lw, i), lw.onnx_shape(i)))
    outs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph([node], "node", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", lw.opset)],
                              ir_version=9)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - no better facts: the handler reports the shape
        return
    for vi in inferred.graph.output:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") \
                and all(d.HasField("dim_value") for d in tt.shape.dim):
            lw.vinfo[vi.name] = vi.type
