"""The tensor-engine ops: GEMM, QKV_PROJ, CONV, MATMUL, ATTENTION, and KV_UPDATE (the cache
the attention reads). Their interpreter kernels quantize per the layer's bits (the
quantization state `it` of the Interpreter)."""

from __future__ import annotations

from typing import Any, ClassVar

from kernbench.ir.model import LayerIR, TensorIR
from kernbench.ir.ops import rules
from kernbench.ir.ops.base import (
    AttrView,
    IrOp,
    LayerCall,
    QuantState,
    Shape,
    ShapeMismatch,
    bcast,
    register,
)
from kernbench.ir.ops.defs import BOOL, FLOAT, INT, attr, operand, opt_operand, result


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
    results = (result("y", like="x"),)
    attributes = ()


#: a convolution's window (ONNX Conv's, auto_pad resolved into `pads` by the importer)
CONV_ATTRS = (
    attr("strides", list[int], help="the step per spatial axis"),
    attr("pads", list[int], help="the padding, every axis's begin then every axis's end"),
    attr("dilations", list[int], help="the kernel dilation per spatial axis"),
    attr("group", int, help="the channel groups"),
    attr("kernel_shape", list[int] | None, None, "the kernel's spatial shape (the weight "
         "says it too)"),
)


def conv_constraints(a: AttrView, x: TensorIR, w: TensorIR) -> None:
    """`CONV_ATTRS` against input `x` [N, C, ...] and weight `w` [O, C/group, ...]: one
    stride / dilation / kernel size per spatial axis, two pads; `group` divides C and O,
    and C / group is the weight's second axis; `kernel_shape` is the weight's."""
    r = rules.rank(x)
    rules.window(a, r, kernel=a.kernel_shape)
    if rules.rank(w) != r:
        rules.fail("group", f"cannot apply: weight rank {rules.rank(w)} != input rank {r}")
    c, o = x.shape[1], w.shape[0]
    rules.divides("group", a.group, c, "the input channels")
    rules.divides("group", a.group, o, "the output channels")
    if w.shape[1] * a.group != c:
        rules.fail("group", f"{a.group} x the weight's {w.shape[1]} channels per group is not "
                   f"the input's {c} channels")
    if a.kernel_shape is not None and list(a.kernel_shape) != w.shape[2:]:
        rules.fail("kernel_shape", f"{a.kernel_shape} is not the weight's {w.shape[2:]}")


@register
class Gemm(TensorEngineOp):
    """x [.., K] @ w [K, N] (+ bias [N]) → [.., N]."""

    op_type = "GEMM"
    #: an integer w is an imported quantized weight (its `quant` gives the scale)
    operands = (operand("x", FLOAT, rank=(1, None)), operand("w", FLOAT | INT, rank=2),
                opt_operand("bias", like="x"))

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
    operands = (operand("x", FLOAT, rank=(1, None)), operand("w_q", FLOAT | INT, rank=2),
                operand("w_k", like="w_q", rank=2), operand("w_v", like="w_q", rank=2),
                opt_operand("b_q", like="x"), opt_operand("b_k", like="x"),
                opt_operand("b_v", like="x"))
    results = (result("q", like="x"), result("k", like="x"), result("v", like="x"))
    attributes = (
        attr("num_heads", int | None, None, "query heads (the shape rule checks w_q's N)"),
        attr("num_kv_heads", int | None, None, "key / value heads"),
        attr("head_dim", int | None, None, "the size of one head"),
    )

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """The head counts and size come together or not at all."""
        given = [k for k in ("num_heads", "num_kv_heads", "head_dim") if getattr(a, k)]
        if given and len(given) < 3:
            missing = ({"num_heads", "num_kv_heads", "head_dim"} - set(given)).pop()
            rules.fail(missing, f"is missing: {', '.join(given)} given without it")

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        x, a = ins[0], cls.attrs(node)
        if len(ins) not in (4, 7):
            raise ShapeMismatch("QKV_PROJ takes [x, w_q, w_k, w_v (, b_q, b_k, b_v)] -> [q, k, v]")
        for j in range(3):
            w = ins[1 + j]
            if len(w) != 2 or w[0] != x[-1] or outs[j] != x[:-1] + [w[1]]:
                raise ShapeMismatch(f"projection {j}: x {x} @ w {w} -> {outs[j]}")
        hq, hkv, d = a.num_heads, a.num_kv_heads, a.head_dim
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
    operands = (operand("x", FLOAT, rank=(3, None)), operand("w", FLOAT | INT, rank=(3, None)),
                opt_operand("bias", like="x", rank=1))
    attributes = CONV_ATTRS
    kernel_attrs = ("strides", "pads", "dilations", "group")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        conv_constraints(a, ins[0], ins[1])

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = cls.attrs(node)
        return LayerCall("conv", {**_te_prec(it, node), "w_quant": it.weight_quant(node.inputs[1]),
                                  **{k: getattr(a, k) for k in cls.kernel_attrs}})


@register
class Matmul(TensorEngineOp):
    """A @ B of two activations (batched)."""

    op_type = "MATMUL"
    operands = (operand("a", FLOAT, rank=(1, None)), operand("b", like="a", rank=(1, None)))
    results = (result("y", like="a"),)

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        qa = it.qa(node)
        return LayerCall("matmul", {"a_bits": qa, "a_static": it.static_act(node.inputs[0], qa),
                                    "b_static": it.static_act(node.inputs[1], qa)})


@register
class Attention(TensorEngineOp):
    """softmax(Q·Kᵀ·scale + mask)·V over (B, H, S, D) with grouped KV heads."""

    op_type = "ATTENTION"
    operands = (operand("q", FLOAT, rank=4), operand("k", like="q", rank=4),
                operand("v", like="q", rank=4), opt_operand("mask", BOOL | FLOAT))
    results = (result("y", like="q", rank=4),)
    attributes = (
        attr("num_heads", int, help="query heads"),
        attr("num_kv_heads", int, help="key / value heads (a divisor of num_heads)"),
        attr("head_dim", int, help="the size of one head"),
        attr("scale", float, help="the factor of Q·Kᵀ"),
        attr("causal", bool, False, "a query sees the keys up to its own position"),
        attr("causal_offset", int, 0, "the keys before the first query (the past length)"),
        attr("softcap", float, 0.0, "tanh soft-capping of the scores (0: none)"),
        attr("mask", str, "none", "what the mask input holds", values=("none", "additive",
                                                                          "bool")),
        attr("sliding_window", int, 0, "a query sees this many keys back (0: all)"),
        attr("kv_block", int | None, None, "compiler: the key rows per block when K / V do "
             "not fit in a PE's memory"),
        attr("kv_parts", int | None, None, "compiler: the key ranges split over PEs"),
        attr("kv_first", int | None, None, "compiler: the key rows of the first range"),
    )

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """Query heads in whole groups of the KV heads; `mask` says what the mask input
        holds (none when there is none); window, offset and KV blocking not negative."""
        rules.divides("num_kv_heads", a.num_kv_heads, a.num_heads, "num_heads")
        mask = ins[3] if len(ins) > 3 else None
        if (mask is None) != (a.mask == "none"):
            rules.fail("mask", f"{a.mask!r} with {'no' if mask is None else 'a'} mask input")
        if mask is not None and (mask.dtype == "bool") != (a.mask == "bool"):
            rules.fail("mask", f"{a.mask!r} with a {mask.dtype} mask input")
        rules.at_least("sliding_window", a.sliding_window, 0)
        rules.at_least("causal_offset", a.causal_offset, 0)
        for k in ("kv_block", "kv_parts", "kv_first"):
            if getattr(a, k) is not None:
                rules.at_least(k, getattr(a, k), 1)
        if a.kv_first is not None and a.kv_parts is None:
            rules.fail("kv_first", "is set without kv_parts")

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        q, k, v = ins[:3]
        a = cls.attrs(node)
        hq, hkv, d = a.num_heads, a.num_kv_heads, a.head_dim
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
        a = cls.attrs(node)
        qa, kvb = it.qa(node), it.qkv(node)
        return LayerCall("attention", {
            "num_heads": a.num_heads, "num_kv_heads": a.num_kv_heads, "scale": a.scale,
            "softcap": a.softcap,
            "causal_offset": int(a.causal_offset) if a.causal else None,
            "a_bits": qa, "kv_bits": kvb, "q_static": it.static_act(node.inputs[0], qa),
            "k_static": it.static_act(node.inputs[1], kvb),
            "v_static": it.static_act(node.inputs[2], kvb), "kv_block": a.kv_block,
            "kv_parts": a.kv_parts, "kv_first": a.kv_first})


@register
class KvUpdate(IrOp):
    """The present KV cache: the past rows then the new ones along `axis`. Run whole it
    is a copy on the vector engine."""

    op_type = "KV_UPDATE"
    layer_cost = "copy"
    operands = (operand("past", FLOAT, rank=4), operand("new", like="past", rank=4))
    results = (result("present", like="past", rank=4),)
    attributes = (
        attr("axis", int, 2, "the sequence axis the new rows append along"),
        attr("in_place", bool, False, "the cache is written where it is (the past rows are "
             "not copied)"),
    )

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        past, new = ins[0], ins[1]
        ax = cls.attrs(node).axis
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
        return LayerCall("kv_update", {"axis": cls.attrs(node).axis,
                                       "kv_bits": it.qkv(node), "static_scale": static})
