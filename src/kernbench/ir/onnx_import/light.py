"""onnx.checker and shape inference without copying the weights.

Both take a ModelProto and serialize it whole for the C++ side, and shape inference parses
its whole result back: for a model of hundreds of MB of weights, most of an import. What
they decide never depends on a large initializer's values, only on its name, type and
shape. So they run on a light copy of the model in which every large, plainly stored
initializer (`movable`) is a typed graph input instead, and what shape inference adds
(value_info, the graph outputs' types, the nodes with their subgraphs' value_info) is put
into the model itself. Small initializers stay: shape inference with data propagation
reads their values (a Reshape's shape, a Slice's starts). An initializer stored in an
unusual way stays too, so that the checker's verdict on it (and its message) is the same.
"""

from __future__ import annotations

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import TensorProto, helper

#: initializers with more elements than this are checked and inferred as typed inputs
LIGHT_ELEMENTS = 4096

#: TensorProto fields holding typed values (a plainly stored tensor has none of them)
TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                 "uint64_data")


def movable(t: TensorProto) -> bool:
    """Is `t` large and stored plainly (raw bytes of a numeric type, nothing else), so that
    as a typed input it checks and infers exactly as it does as an initializer?"""
    n = 1
    for d in t.dims:
        n *= d
    return (n > LIGHT_ELEMENTS and t.data_type not in (TensorProto.UNDEFINED, TensorProto.STRING)
            and t.data_type in helper.get_all_tensor_dtypes()
            and t.data_location == TensorProto.DEFAULT and t.HasField("raw_data")
            and not t.external_data and not any(len(getattr(t, f)) for f in TYPED_FIELDS))


def light_model(model: onnx.ModelProto, detached: frozenset[str] = frozenset()
                ) -> onnx.ModelProto:
    """`model` with its `movable` initializers as typed graph inputs (`model` itself when
    it has none): what onnx.checker and shape inference are given. `detached` names
    initializers whose raw_data was left out when the file was read (`detached`): large
    and plainly stored, so movable."""
    g = model.graph
    moved = [t for t in g.initializer if t.name in detached or movable(t)]
    if not moved:
        return model
    light = _light_copy(model, {t.name for t in moved})
    names = {i.name for i in g.input}
    light.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in moved if t.name not in names)
    return light


def inferred_shapes(model: onnx.ModelProto, light: onnx.ModelProto,
                    **infer_kw: object) -> onnx.ModelProto:
    """`onnx.shape_inference.infer_shapes(model, **infer_kw)`'s result, inferred on
    `light_model(model)`: `model` itself with what inference adds (value_info, outputs,
    nodes), or inference's own copy when `light` is `model`. Raises what it raises."""
    inferred = onnx.shape_inference.infer_shapes(light, **infer_kw)
    if light is model:
        return inferred
    g = model.graph
    for field in ("value_info", "output", "node"):
        g.ClearField(field)
        getattr(g, field).extend(getattr(inferred.graph, field))
    return model


def _light_copy(model: onnx.ModelProto, leave_out: set[str]) -> onnx.ModelProto:
    """`model` without the initializers named `leave_out` (nothing else is copied twice)."""
    light = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            _set(light, fd, value)
    for fd, value in model.graph.ListFields():
        if fd.name == "initializer":
            light.graph.initializer.extend(t for t in value if t.name not in leave_out)
        else:
            _set(light.graph, fd, value)
    return light


def _set(msg: Message, fd: FieldDescriptor, value: object) -> None:
    """Copy one field (`fd`, its `value`) into the message `msg`."""
    if fd.is_repeated:
        getattr(msg, fd.name).extend(value)
    elif fd.type == fd.TYPE_MESSAGE:
        getattr(msg, fd.name).CopyFrom(value)
    else:
        setattr(msg, fd.name, value)
