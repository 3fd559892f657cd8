"""The tensor-engine ops: GEMM, QKV_PROJ, CONV, MATMUL, ATTENTION, and KV_UPDATE (the cache
the attention reads). Their interpreter kernels quantize per the layer's bits (the
quantization state `it` of the Interpreter)."""

from __future__ import annotations

from typing import Any, ClassVar

from kernbench.ir.model import LayerIR
from kernbench.ir.ops.base import (
    IrOp,
    LayerCall,
    QuantState,
    Shape,
    ShapeMismatch,
    attrs_of,
    bcast,
    register,
)


def _te_prec(it: QuantState, n: LayerIR) -> dict[str, Any]:
    return {"a_bits": it.qa(n), "w_bits": it.qw(n), "x_static": it.static_act(n.inputs[0],
                                                                              it.qa(n)),
            "per_channel": it.per_channel}


def _imported(it: QuantState, tid: str) -> dict[str, Any] | None:
    # an imported integer weight is used as such only when quantizing
    return it.weight_quant(tid) if it.quantize else None


class TensorEngineOp(IrOp):
    """An op that runs on the tensor engine when it runs whole."""

    vector: ClassVar[bool] = False


@register
class Gemm(TensorEngineOp):
    """x [.., K] @ w [K, N] (+ bias [N]) → [.., N]."""

    op_type = "GEMM"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        x, w = ins[0], ins[1]
        if len(w) != 2 or not x or x[-1] != w[0]:
            raise ShapeMismatch(f"x {x} @ w {w} needs x[-1] == w[0] and a 2-D w [K, N]")
        if outs[0] != x[:-1] + [w[1]]:
            raise ShapeMismatch(f"output {outs[0]} != {x[:-1] + [w[1]]}")
        if len(ins) > 2 and ins[2] is not None and ins[2] not in ([w[1]], outs[0]):
            raise ShapeMismatch(f"bias {ins[2]} is not [N]={w[1]}")

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("gemm", {**_te_prec(it, node),
                                  "w_quant": _imported(it, node.inputs[1])})


@register
class QkvProj(TensorEngineOp):
    """x @ (w_q, w_k, w_v) (+ biases) → (q, k, v)."""

    op_type = "QKV_PROJ"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        x, a = ins[0], node.attributes
        if len(ins) not in (4, 7) or len(outs) != 3:
            raise ShapeMismatch("QKV_PROJ takes [x, w_q, w_k, w_v (, b_q, b_k, b_v)] -> [q, k, v]")
        for j in range(3):
            w = ins[1 + j]
            if len(w) != 2 or w[0] != x[-1] or outs[j] != x[:-1] + [w[1]]:
                raise ShapeMismatch(f"projection {j}: x {x} @ w {w} -> {outs[j]}")
        hq, hkv, d = a.get("num_heads"), a.get("num_kv_heads"), a.get("head_dim")
        if hq and d and (ins[1][1] != hq * d or ins[2][1] != hkv * d):
            raise ShapeMismatch(f"heads {hq}/{hkv} x head_dim {d} do not match N of w_q / w_k")

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("qkv_proj", {**_te_prec(it, node), "w_quants": [
            _imported(it, node.inputs[1 + j]) for j in range(3)]})


@register
class Conv(TensorEngineOp):
    """ONNX Conv (NCHW), quantized per the layer's bits."""

    op_type = "CONV"

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("conv", {**_te_prec(it, node), "w_quant": it.weight_quant(node.inputs[1]),
                                  **attrs_of(node, ("strides", "pads", "dilations", "group"), {})})


@register
class Matmul(TensorEngineOp):
    """A @ B of two activations (batched)."""

    op_type = "MATMUL"

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        qa = it.qa(node)
        return LayerCall("matmul", {"a_bits": qa, "a_static": it.static_act(node.inputs[0], qa),
                                    "b_static": it.static_act(node.inputs[1], qa)})


@register
class Attention(TensorEngineOp):
    """softmax(Q·Kᵀ·scale + mask)·V over (B, H, S, D) with grouped KV heads."""

    op_type = "ATTENTION"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        q, k, v = ins[:3]
        a = node.attributes
        hq, hkv, d = a.get("num_heads"), a.get("num_kv_heads"), a.get("head_dim")
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            raise ShapeMismatch("q, k, v must be rank 4 (B, H, S, D)")
        if q[1] != hq or k[1] != hkv or v[1] != hkv or not hkv or hq % hkv:
            raise ShapeMismatch(f"heads: q {q[1]} (num_heads {hq}), k/v {k[1]}/{v[1]} "
                                f"(num_kv_heads {hkv})")
        if q[3] != d or k[3] != d or k[2] != v[2] or q[0] != k[0]:
            raise ShapeMismatch(f"q {q}, k {k}, v {v}, head_dim {d}")
        if outs[0] != [q[0], hq, q[2], v[3]]:
            raise ShapeMismatch(f"output {outs[0]} != {[q[0], hq, q[2], v[3]]}")
        if len(ins) > 3 and ins[3] is not None and bcast(ins[3], [q[0], hq, q[2], ins[3][-1]]) \
                is None:  # fmt: skip
            raise ShapeMismatch(f"mask {ins[3]} does not broadcast to {[q[0], hq, q[2], k[2]]}")

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = node.attributes
        qa, kvb = it.qa(node), it.qkv(node)
        return LayerCall("attention", {
            "num_heads": a["num_heads"], "num_kv_heads": a["num_kv_heads"], "scale": a["scale"],
            "softcap": a.get("softcap", 0.0),
            "causal_offset": int(a.get("causal_offset", 0)) if a.get("causal") else None,
            "a_bits": qa, "kv_bits": kvb, "q_static": it.static_act(node.inputs[0], qa),
            "k_static": it.static_act(node.inputs[1], kvb),
            "v_static": it.static_act(node.inputs[2], kvb), "kv_block": a.get("kv_block"),
            "kv_parts": a.get("kv_parts"), "kv_first": a.get("kv_first")})


@register
class KvUpdate(IrOp):
    """The present KV cache: the past rows then the new ones along `axis`. Run whole it
    is a copy on the vector engine."""

    op_type = "KV_UPDATE"
    layer_cost = "copy"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        past, new = ins[0], ins[1]
        ax = node.attributes.get("axis", 2)
        want = list(new)
        if len(past) != len(new):
            raise ShapeMismatch(f"past {past} and new {new} ranks differ")
        want[ax] = past[ax] + new[ax]
        if outs[0] != want:
            raise ShapeMismatch(f"output {outs[0]} != {want}")

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        out = it.g.tensors.get(node.outputs[0])
        static = None
        if out is not None and out.quant is not None:
            # a statically calibrated cache (compiler): stored at kv bits with that scale
            static = it.g.weights[out.quant.scale]
        return LayerCall("kv_update", {"axis": node.attributes.get("axis", 2),
                                       "kv_bits": it.qkv(node), "static_scale": static})
