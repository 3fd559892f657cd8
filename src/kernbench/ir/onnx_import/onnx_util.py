"""ONNX-side helpers of the importer: element types, tensor data, node names and
attributes (shared by lower.py and the handler modules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernbench.numerics.dtypes import short_name

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
