"""Importer handlers for window / scan / clamp ops: MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool, CumSum, Clip.

MaxPool / AveragePool become a POOL layer (mode max / avg and the window attributes,
auto_pad resolved to explicit pads); the global pools are a REDUCE over the spatial axes;
CumSum becomes a CUMSUM layer (the axis input must be constant); Clip becomes an
ELEMENTWISE `clip` layer with three inputs (x, lo, hi), an absent bound being a constant
±inf (or the integer dtype's limit) so the kernel has one form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from kernbench.ir.onnx_import.lower import Lowering
from kernbench.numerics.dtypes import np_dtype


def _at(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _resolve_pads(at: dict[str, Any], xs: list[int], ks: list[int], strides: list[int],
                  dil: list[int]) -> list[int]:
    nsp = len(ks)
    auto = at.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * (2 * nsp)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        return [int(p) for p in at.get("pads", [0] * (2 * nsp))]
    pads = [0] * (2 * nsp)
    for i in range(nsp):
        out = -(-xs[2 + i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (ks[i] - 1) * dil[i] + 1 - xs[2 + i])
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        pads[i], pads[i + nsp] = lo, total - lo
    return pads


def pool(lw: Lowering, node: onnx.NodeProto) -> None:
    """MaxPool / AveragePool → POOL (MaxPool's Indices output is refused)."""
    at = _at(node)
    if len(node.output) > 1 and node.output[1]:
        raise lw.error("MaxPool Indices output not supported")
    xs = lw.shape(node.input[0])
    if len(xs) < 3:
        raise lw.error(f"{node.op_type} input of rank {len(xs)} (needs N, C, spatial...)")
    ks = [int(k) for k in at["kernel_shape"]]
    nsp = len(ks)
    strides = [int(s) for s in at.get("strides", [1] * nsp)]
    dil = [int(d) for d in at.get("dilations", [1] * nsp)]
    if int(at.get("storage_order", 0)):
        raise lw.error("MaxPool storage_order=1 not supported")
    lw.emit("POOL", [node.input[0]], [node.output[0]], {
        "mode": "max" if node.op_type == "MaxPool" else "avg", "kernel_shape": ks,
        "strides": strides, "pads": _resolve_pads(at, xs, ks, strides, dil),
        "dilations": dil, "ceil_mode": bool(at.get("ceil_mode", 0)),
        "count_include_pad": bool(at.get("count_include_pad", 0)),
    })  # fmt: skip


def global_pool(lw: Lowering, node: onnx.NodeProto) -> None:
    """GlobalAveragePool / GlobalMaxPool → REDUCE mean / max over axes 2.., keepdims."""
    rank = len(lw.shape(node.input[0]))
    op = "mean" if node.op_type == "GlobalAveragePool" else "max"
    lw.emit("REDUCE", [node.input[0]], [node.output[0]],
            {"op": op, "axes": list(range(2, rank)), "keepdims": True})


def cumsum(lw: Lowering, node: onnx.NodeProto) -> None:
    """CumSum → CUMSUM (axis from the constant second input)."""
    ac = lw.const(node.input[1])
    if ac is None:
        raise lw.error("non-constant CumSum axis not supported")
    rank = len(lw.shape(node.input[0]))
    at = _at(node)
    lw.emit("CUMSUM", [node.input[0]], [node.output[0]], {
        "axis": int(ac.reshape(-1)[0]) % rank, "exclusive": bool(at.get("exclusive", 0)),
        "reverse": bool(at.get("reverse", 0))})  # fmt: skip


def _bound(lw: Lowering, node: onnx.NodeProto, k: int, attr: str, low: bool) -> str:
    at = _at(node)
    dt = np_dtype(lw.dtype(node.input[0]))
    if len(node.input) > k and node.input[k]:
        return node.input[k]
    if attr in at:  # opset < 11: bounds are attributes
        v: Any = at[attr]
    elif dt.kind in "fV":  # V: bfloat16
        v = -np.inf if low else np.inf
    else:
        v = np.iinfo(dt).min if low else np.iinfo(dt).max
    return lw.new_const(node.output[0], np.asarray(v, dtype=dt))


def clip(lw: Lowering, node: onnx.NodeProto) -> None:
    """Clip → ELEMENTWISE clip(x, lo, hi)."""
    lo = _bound(lw, node, 1, "min", True)
    hi = _bound(lw, node, 2, "max", False)
    lw.emit("ELEMENTWISE", [node.input[0], lo, hi], [node.output[0]], {"op": "clip"})
