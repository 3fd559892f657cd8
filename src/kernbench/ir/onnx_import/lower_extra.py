"""More ONNX op handlers: ArgMax / ArgMin, ConstantOfShape,
Range, Tile, Pad, TopK, Einsum, ScatterElements / ScatterND, Instance- / GroupNormalization,
LogSoftmax, Hardmax, Trilu, OneHot, DepthToSpace / SpaceToDepth, Shape / Size (folded).

Each handler takes the import state (`lower.Lowering`) and one ONNX node, and emits IR
layers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from kernbench.ir.onnx_import.lower import Handler, Lowering


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _argmax(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    rank = len(lw.shape(node.input[0]))
    axis = int(at.get("axis", 0)) % max(rank, 1)
    lw.emit("REDUCE", [node.input[0]], [node.output[0]], {
        "op": node.op_type.lower(), "axes": [axis], "keepdims": bool(at.get("keepdims", 1)),
        "select_last_index": bool(at.get("select_last_index", 0))})  # fmt: skip


def _constant_of_shape(lw: Lowering, node: onnx.NodeProto) -> None:
    # the shape input is not constant (else the node was folded), but shape inference
    # knows the output's shape: a broadcast of the one-element value
    value = _attrs(node).get("value")
    v = onnx.numpy_helper.to_array(value).reshape(()) if value is not None \
        else np.zeros((), np.float32)  # fmt: skip
    c = lw.new_const(node.output[0], np.asarray(v))
    lw.emit("EXPAND", [c], [node.output[0]], {"shape": lw.shape(node.output[0])})


def _range(lw: Lowering, node: onnx.NodeProto) -> None:  # folded when its inputs are constant
    raise lw.error("Range with non-constant start / limit / delta not supported")


def _tile(lw: Lowering, node: onnx.NodeProto) -> None:
    reps = lw.const(node.input[1])
    if reps is None:
        raise lw.error("non-constant Tile repeats not supported")
    lw.emit("TILE", [node.input[0]], [node.output[0]],
            {"repeats": [int(r) for r in reps.reshape(-1)]})  # fmt: skip


def _pad(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    shape = lw.shape(node.input[0])
    rank = len(shape)
    pads = at.get("pads")
    if len(node.input) > 1 and node.input[1]:
        pc = lw.const(node.input[1])
        if pc is None:
            raise lw.error("non-constant Pad pads not supported")
        pads = [int(p) for p in pc.reshape(-1)]
    axes = list(range(rank))
    if len(node.input) > 3 and node.input[3]:
        ac = lw.const(node.input[3])
        if ac is None:
            raise lw.error("non-constant Pad axes not supported")
        axes = [int(a) % rank for a in ac.reshape(-1)]
    full = [0] * (2 * rank)
    for k, a in enumerate(axes):
        full[a], full[a + rank] = int(pads[k]), int(pads[k + len(axes)])
    ins = [node.input[0]]
    if len(node.input) > 2 and node.input[2]:
        ins.append(node.input[2])
    mode = at.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise lw.error(f"Pad mode {mode!r} not supported")
    lw.emit("PAD", ins, [node.output[0]], {"pads": full, "mode": mode,
                                           "value": float(at.get("value", 0.0))})


def _topk(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    rank = len(lw.shape(node.input[0]))
    if len(node.input) > 1:
        kc = lw.const(node.input[1])
        if kc is None:
            raise lw.error("non-constant TopK k not supported")
        k = int(kc.reshape(-1)[0])
    else:
        k = int(at["k"])
    outs = [o for o in node.output]
    ys = lw.shape(node.input[0])
    axis = int(at.get("axis", -1)) % rank
    ys[axis] = k
    lw.emit("TOPK", [node.input[0]], outs, {
        "k": k, "axis": axis, "largest": bool(at.get("largest", 1)),
        "sorted": bool(at.get("sorted", 1))},
        [ys, ys], [lw.dtype(node.input[0]), "int64"])  # fmt: skip


def _einsum(lw: Lowering, node: onnx.NodeProto) -> None:
    eq = str(_attrs(node)["equation"]).replace(" ", "")
    lw.emit("EINSUM", list(node.input), [node.output[0]], {"equation": eq})


def _scatter(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    attrs: dict[str, Any] = {"reduction": str(at.get("reduction", "none"))}
    if node.op_type == "ScatterElements":
        attrs["axis"] = int(at.get("axis", 0)) % len(lw.shape(node.input[0]))
    op = "SCATTER_ELEMENTS" if node.op_type == "ScatterElements" else "SCATTER_ND"
    lw.emit(op, list(node.input[:3]), [node.output[0]], attrs)


def _group_norm(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    c = lw.shape(node.input[0])[1]
    groups = c if node.op_type == "InstanceNormalization" else int(at["num_groups"])
    per_channel = int(np.prod(lw.shape(node.input[1]))) == c  # opset 21; 18 is per group
    lw.emit("GROUP_NORM", list(node.input[:3]), [node.output[0]], {
        "groups": groups, "eps": float(at.get("epsilon", 1e-5)),
        "per_channel_affine": per_channel})  # fmt: skip


def _axis_op(op_type: str, default_axis: int) -> Handler:
    def h(lw: Lowering, node: onnx.NodeProto) -> None:
        rank = len(lw.shape(node.input[0]))
        axis = int(_attrs(node).get("axis", default_axis)) % max(rank, 1)
        lw.emit(op_type, [node.input[0]], [node.output[0]], {"axis": axis})

    return h


def _trilu(lw: Lowering, node: onnx.NodeProto) -> None:
    upper = bool(_attrs(node).get("upper", 1))
    lw.emit("TRILU", [i for i in node.input[:2] if i], [node.output[0]], {"upper": upper})


def _one_hot(lw: Lowering, node: onnx.NodeProto) -> None:
    axis = int(_attrs(node).get("axis", -1))
    lw.emit("ONE_HOT", list(node.input[:3]), [node.output[0]], {"axis": axis})


def _depth_space(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    attrs: dict[str, Any] = {"blocksize": int(at["blocksize"]),
                             "mode": str(at.get("mode", "DCR"))}
    op = "DEPTH_TO_SPACE" if node.op_type == "DepthToSpace" else "SPACE_TO_DEPTH"
    lw.emit(op, [node.input[0]], [node.output[0]], attrs)


def _cast_like(lw: Lowering, node: onnx.NodeProto) -> None:
    to = lw.dtype(node.input[1])
    if lw.dtype(node.input[0]) == to:
        lw.alias[node.output[0]] = lw.name(node.input[0])
        return
    lw.emit("ELEMENTWISE", [node.input[0]], [node.output[0]], {"op": "cast", "to": to})


def _shape(lw: Lowering, node: onnx.NodeProto) -> None:  # folded when the input shape is static
    raise lw.error(f"{node.op_type} of a tensor without a static shape not supported")


EXTRA_HANDLERS: dict[str, Handler] = {
    "ArgMax": _argmax,
    "ArgMin": _argmax,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Tile": _tile,
    "Pad": _pad,
    "TopK": _topk,
    "Einsum": _einsum,
    "ScatterElements": _scatter,
    "ScatterND": _scatter,
    "InstanceNormalization": _group_norm,
    "GroupNormalization": _group_norm,
    "LogSoftmax": _axis_op("LOG_SOFTMAX", -1),
    "Hardmax": _axis_op("HARDMAX", -1),
    "Trilu": _trilu,
    "OneHot": _one_hot,
    "DepthToSpace": _depth_space,
    "SpaceToDepth": _depth_space,
    "CastLike": _cast_like,
    "Shape": _shape,
    "Size": _shape,
}
