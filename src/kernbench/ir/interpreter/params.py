"""The IR side of every interpreter kernel: an IR node (+ the interpreter's quantization
state: calibrated scales, bit widths, imported integer weights) → a LayerCall, i.e. the
name of a `kernbench.numerics.layers` kernel and its plain params.

The interpreter runs the call on its values; the simulator's data pass (host/bundle.py)
stores the same call in its op log for a whole-layer op and runs it on the values it
reads from memory. One code path: what the interpreter computes is what the data pass
computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernbench.errors import InputError
from kernbench.ir.model import LayerIR


@dataclass(frozen=True)
class LayerCall:
    """A numerics layer kernel (`kernel`) and its plain keyword params."""

    kernel: str
    params: dict[str, Any] = field(default_factory=dict)


Prepare = Callable[[Any, LayerIR], LayerCall]
PREPARE: dict[str, Prepare] = {}


def _prepares(*op_types: str) -> Callable[[Prepare], Prepare]:
    def deco(f: Prepare) -> Prepare:
        for op in op_types:
            PREPARE[op] = f
        return f

    return deco


def prepare(interp: Any, node: LayerIR) -> LayerCall:
    """The LayerCall of `node` (`interp` may be None for ops without quantization)."""
    fn = PREPARE.get(node.op_type)
    if fn is None:
        raise InputError(f"op_type {node.op_type!r} has no interpreter kernel",
                         where=f"node {node.id}")
    return fn(interp, node)


def _attrs(node: LayerIR, *names: str, **defaults: Any) -> dict[str, Any]:
    out = {k: node.attributes[k] for k in names}
    out.update({k: node.attributes.get(k, v) for k, v in defaults.items()})
    return out


# ------------------------------------------------------------------ TE layers
def _te_prec(it: Any, n: LayerIR) -> dict[str, Any]:
    return {"a_bits": it.qa(n), "w_bits": it.qw(n), "x_static": it.static_act(n.inputs[0],
                                                                              it.qa(n)),
            "per_channel": it.per_channel}


def _imported(it: Any, tid: str) -> dict[str, Any] | None:
    # an imported integer weight is used as such only when quantizing
    return it.weight_quant(tid) if it.quantize else None


@_prepares("GEMM")
def _gemm(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("gemm", {**_te_prec(it, n), "w_quant": _imported(it, n.inputs[1])})


@_prepares("QKV_PROJ")
def _qkv(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("qkv_proj", {**_te_prec(it, n),
                                  "w_quants": [_imported(it, n.inputs[1 + j]) for j in range(3)]})


@_prepares("CONV")
def _conv(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("conv", {**_te_prec(it, n), "w_quant": it.weight_quant(n.inputs[1]),
                              **_attrs(n, "strides", "pads", "dilations", "group")})


@_prepares("MATMUL")
def _matmul(it: Any, n: LayerIR) -> LayerCall:
    qa = it.qa(n)
    return LayerCall("matmul", {"a_bits": qa, "a_static": it.static_act(n.inputs[0], qa),
                                "b_static": it.static_act(n.inputs[1], qa)})


@_prepares("ATTENTION")
def _attention(it: Any, n: LayerIR) -> LayerCall:
    a = n.attributes
    qa, kvb = it.qa(n), it.qkv(n)
    return LayerCall("attention", {
        "num_heads": a["num_heads"], "num_kv_heads": a["num_kv_heads"], "scale": a["scale"],
        "softcap": a.get("softcap", 0.0),
        "causal_offset": int(a.get("causal_offset", 0)) if a.get("causal") else None,
        "a_bits": qa, "kv_bits": kvb, "q_static": it.static_act(n.inputs[0], qa),
        "k_static": it.static_act(n.inputs[1], kvb),
        "v_static": it.static_act(n.inputs[2], kvb), "kv_block": a.get("kv_block"),
        "kv_parts": a.get("kv_parts"), "kv_first": a.get("kv_first")})


@_prepares("KV_UPDATE")
def _kv_update(it: Any, n: LayerIR) -> LayerCall:
    out = it.g.tensors.get(n.outputs[0])
    static = None
    if out is not None and out.quant is not None:
        # a statically calibrated cache (compiler): stored at kv bits with that scale
        static = it.g.weights[out.quant.scale]
    return LayerCall("kv_update", {"axis": n.attributes.get("axis", 2), "kv_bits": it.qkv(n),
                                   "static_scale": static})


# ------------------------------------------------------------------ VE and data movement
def _simple(kernel: str, *names: str, **defaults: Any) -> Prepare:
    def f(it: Any, n: LayerIR) -> LayerCall:
        return LayerCall(kernel, _attrs(n, *names, **defaults))

    return f


_SIMPLE: dict[str, Prepare] = {
    "IDENTITY": _simple("identity"),
    "REDUCE": _simple("reduce", "op", "axes", "keepdims", select_last_index=False),
    "SOFTMAX": _simple("softmax", "axis"),
    "LAYER_NORM": _simple("layernorm", "axis", "eps"),
    "RMS_NORM": _simple("rmsnorm", "axis", "eps"),
    "GELU": _simple("gelu", approximate="none"),
    "SILU": _simple("silu"),
    "ROPE": _simple("rope"),
    "EMBEDDING": _simple("embedding"),
    "GATHER": _simple("gather", "axis"),
    "GATHER_ELEMENTS": _simple("gather_elements", "axis"),
    "GATHER_ND": _simple("gather_nd", batch_dims=0),
    "RESHAPE": _simple("reshape", "shape"),
    "TRANSPOSE": _simple("transpose", "perm"),
    "SPLIT": _simple("split", "axis", "sizes"),
    "SLICE": _simple("slice", "starts", "ends", "steps"),
    "CONCAT": _simple("concat", "axis"),
    "EXPAND": _simple("expand", "shape"),
    "DYNAMIC_QUANTIZE": _simple("dynamic_quantize"),
    "MATMUL_INTEGER": _simple("matmul_integer"),
    "QLINEAR_MATMUL": _simple("qlinear_matmul"),
    "QLINEAR_CONV": _simple("qlinear_conv", "strides", "pads", "dilations", "group"),
    "CONV_INTEGER": _simple("conv_integer", "strides", "pads", "dilations", "group"),
    "POOL": _simple("pool", "mode", "kernel_shape", "strides", "pads", "dilations",
                    "ceil_mode", "count_include_pad"),
    "CUMSUM": _simple("cumsum", "axis", "exclusive", "reverse"),
    "TILE": _simple("tile", "repeats"),
    "TOPK": _simple("topk", "k", "axis", "largest", "sorted"),
    "EINSUM": _simple("einsum", "equation"),
    "SCATTER_ELEMENTS": _simple("scatter_elements", "axis", reduction="none"),
    "SCATTER_ND": _simple("scatter_nd", reduction="none"),
    "GROUP_NORM": _simple("group_norm", "groups", "eps", "per_channel_affine"),
    "LOG_SOFTMAX": _simple("log_softmax", "axis"),
    "HARDMAX": _simple("hardmax", "axis"),
    "TRILU": _simple("trilu", "upper"),
    "ONE_HOT": _simple("one_hot", "axis"),
    "DEPTH_TO_SPACE": _simple("depth_to_space", "blocksize", "mode"),
    "SPACE_TO_DEPTH": _simple("space_to_depth", "blocksize", "mode"),
}
PREPARE.update(_SIMPLE)


@_prepares("PAD")
def _pad(it: Any, n: LayerIR) -> LayerCall:
    a = n.attributes
    return LayerCall("pad", {"pads": a["pads"], "mode": a["mode"], "value_attr": a["value"]})


EW_ATTRS = frozenset({"to", "alpha", "beta", "gamma", "lambd", "bias", "fmod",
                      "detect_negative", "detect_positive", "direction"})


@_prepares("ADD", "MUL", "ELEMENTWISE")
def _elementwise(it: Any, n: LayerIR) -> LayerCall:
    op = {"ADD": "add", "MUL": "mul"}.get(n.op_type) or n.attributes["op"]
    # the ONNX attributes the importer keeps (cast's `to`, alpha, fmod, ...) are kernel
    # params; other keys (passes' annotations) are not
    params: dict[str, Any] = {"op": op}
    params.update({k: v for k, v in n.attributes.items() if k in EW_ATTRS})
    return LayerCall("elementwise", params)


def _qparams(n: LayerIR) -> dict[str, Any]:
    return {"axis": n.attributes.get("axis"), "block_size": n.attributes.get("block_size", 0)}


def _qbits(n: LayerIR) -> dict[str, Any]:
    dt = n.attributes["dtype"]
    return {"bits": int(dt.lstrip("uint")), "signed": not dt.startswith("u")}


@_prepares("QUANTIZE")
def _quantize(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("quantize", {**_qbits(n), **_qparams(n)})


@_prepares("DEQUANTIZE")
def _dequantize(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("dequantize", _qparams(n))


@_prepares("QDQ")
def _qdq(it: Any, n: LayerIR) -> LayerCall:
    return LayerCall("qdq", {**_qbits(n), **_qparams(n)})
