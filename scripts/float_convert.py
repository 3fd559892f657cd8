"""Convert an fp32 ONNX model to fp16 or bf16 with onnx alone (no torch, no
onnxconverter-common): what a "half-precision export" of a model looks like.

    from float_convert import convert_float
    m16 = convert_float(onnx.load("gpt2.onnx"), "fp16")

Every float32 tensor of the graph becomes the target type: initializers, the tensors of
Constant / ConstantOfShape attributes (and Constant's value_float / value_floats), the
graph's inputs and outputs, and `Cast(to=FLOAT)` casts to the target instead; subgraphs
(If / Loop / Scan) are converted the same way. Finite values outside the target's range
are clamped to its largest finite value (an fp32 mask constant such as -3.4e38 becomes
-65504 in fp16, not -inf, as onnxconverter-common does). value_info is dropped (the
intermediate types change). Integer and bool tensors are left alone. The converted model
still computes its float ops in the target type: onnxruntime's CPU provider has fp16
kernels for the ops of the zoo models but lacks bf16 kernels for many (MatMul, Softmax,
LayerNormalization, ...), so a bf16 model is checked against kernbench's IR interpreter.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

TARGETS = {"fp16": (TensorProto.FLOAT16, np.float16),
           "bf16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16)}


def _to_target(a: np.ndarray, np_t: type) -> np.ndarray:
    big = float(ml_dtypes.finfo(np_t).max)
    with np.errstate(invalid="ignore"):
        clipped = np.where(np.isfinite(a), np.clip(a, -big, big), a)
    return clipped.astype(np_t)


def _tensor(t: TensorProto, to: str) -> None:
    """Convert one float32 TensorProto in place (others untouched)."""
    if t.data_type != TensorProto.FLOAT:
        return
    code, np_t = TARGETS[to]
    a = _to_target(numpy_helper.to_array(t), np_t)
    if to == "fp16":
        new = numpy_helper.from_array(a, t.name)
    else:  # numpy_helper cannot write ml_dtypes.bfloat16: raw bytes of the right type
        new = helper.make_tensor(t.name, code, a.shape, a.tobytes(), raw=True)
    t.CopyFrom(new)


def _node(n: onnx.NodeProto, to: str) -> None:
    code = TARGETS[to][0]
    for a in list(n.attribute):
        if a.type == AttributeProto.TENSOR:
            _tensor(a.t, to)
        elif a.type == AttributeProto.TENSORS:
            for t in a.tensors:
                _tensor(t, to)
        elif a.type == AttributeProto.GRAPH:
            _graph(a.g, to)
        elif a.type == AttributeProto.GRAPHS:
            for sg in a.graphs:
                _graph(sg, to)
        if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
            a.i = code
        if n.op_type == "Constant" and a.name in ("value_float", "value_floats"):
            arr = np.asarray(a.f if a.name == "value_float" else list(a.floats), np.float32)
            t = numpy_helper.from_array(arr, "value")
            _tensor(t, to)
            n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("value", t))


def _graph(g: onnx.GraphProto, to: str) -> None:
    code = TARGETS[to][0]
    for t in g.initializer:
        _tensor(t, to)
    for n in g.node:
        _node(n, to)
    for vi in list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        if tt.elem_type == TensorProto.FLOAT:
            tt.elem_type = code
    del g.value_info[:]


def convert_float(model: onnx.ModelProto, to: str) -> onnx.ModelProto:
    """A copy of `model` with every float32 tensor as `to` ("fp16" or "bf16"); see the
    module docstring for what changes. Raises ValueError for another target."""
    if to not in TARGETS:
        raise ValueError(f"convert_float: target must be one of {sorted(TARGETS)}, not {to!r}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    _graph(m.graph, to)
    return m


def convert_feeds(feeds: dict[str, np.ndarray], to: str) -> dict[str, np.ndarray]:
    """The model inputs for the converted model: float32 arrays as `to`, others as given."""
    np_t = TARGETS[to][1]
    return {k: (v.astype(np_t) if v.dtype == np.float32 else v) for k, v in feeds.items()}
