"""The vector-engine ops: norms, softmax, activations, ADD / MUL, ELEMENTWISE, ROPE, the
reductions and windows. Each names the vector opcode its tiles become; its whole-layer
cost is that opcode's `cost_op` unless it names one."""

from __future__ import annotations

from typing import Any

from kernbench.cmdq.opcodes.ve import (
    VeAddTile,
    VeGeluTile,
    VeLayernormTile,
    VeMulTile,
    VeRmsnormTile,
    VeRopeTile,
    VeSiluTile,
    VeSoftmaxTile,
)
from kernbench.cmdq.opcodes.ve_elementwise import VeCumsumTile, VeElementwiseTile
from kernbench.cmdq.opcodes.ve_window import VePoolTile, VeReduceTile
from kernbench.ir.model import LayerIR, TensorIR
from kernbench.ir.ops import elementwise, elementwise_extra, rules  # noqa: F401  (register the kinds)
from kernbench.ir.ops.base import (
    AttrView,
    IrOp,
    LayerCall,
    OpRuleError,
    QuantState,
    Shape,
    check_broadcast,
    check_same,
    register,
)
from kernbench.ir.ops.defs import (
    BOOL,
    FLOAT,
    NUMBER,
    Attr,
    Operand,
    attr,
    one_of,
    operand,
    opt_operand,
    opt_result,
    result,
    var_operand,
)
from kernbench.ir.ops.ew_kind import EW_KINDS, onnx_attr_defs, onnx_attr_names
from kernbench.numerics.dtypes import dtype

#: every ONNX attribute an ELEMENTWISE kind's kernel takes (the layer attributes that
#: are kernel params)
EW_ATTRS = onnx_attr_names()

#: a float activation in, the same type out
_X = (operand("x", FLOAT, rank=(1, None)),)
_Y = (result("y", like="x"),)
_AXIS = attr("axis", int, help="the axis it runs along")
_NORM = (attr("axis", int, help="the normalized axis (the last, as the compiler tiles it)"),
         attr("eps", float, help="added to the variance"))


@register
class LayerNorm(IrOp):
    op_type = "LAYER_NORM"
    operands = (*_X, opt_operand("scale", like="x"), opt_operand("bias", like="x"))
    results = (*_Y, opt_result("mean", FLOAT), opt_result("inv_std_dev", FLOAT))
    attributes = _NORM
    shape = "same"
    kernel = "layernorm"
    kernel_attrs = ("axis", "eps")
    constraints = classmethod(rules.axis_of_input)
    vector_opcode = VeLayernormTile
    row_wise = True


@register
class RmsNorm(IrOp):
    op_type = "RMS_NORM"
    operands = (*_X, opt_operand("scale", like="x"))
    results = _Y
    attributes = _NORM
    shape = "same"
    kernel = "rmsnorm"
    kernel_attrs = ("axis", "eps")
    constraints = classmethod(rules.axis_of_input)
    vector_opcode = VeRmsnormTile
    row_wise = True


@register
class Softmax(IrOp):
    op_type = "SOFTMAX"
    operands, results, attributes = _X, _Y, (_AXIS,)
    shape = "same"
    kernel = "softmax"
    kernel_attrs = ("axis",)
    constraints = classmethod(rules.axis_of_input)
    vector_opcode = VeSoftmaxTile
    row_wise = True


@register
class Gelu(IrOp):
    op_type = "GELU"
    operands, results = _X, _Y
    attributes = (attr("approximate", str, "none", "the erf form or the tanh approximation",
                       values=("none", "tanh")),)
    shape = "same"
    kernel = "gelu"
    kernel_attrs = ("approximate",)
    vector_opcode = VeGeluTile
    row_wise = True
    epilogue = True


@register
class Silu(IrOp):
    op_type = "SILU"
    operands, results, attributes = _X, _Y, ()
    shape = "same"
    kernel = "silu"
    vector_opcode = VeSiluTile
    row_wise = True
    epilogue = True


class _Binary(IrOp):
    shape = "broadcast"
    row_wise = True
    operands = (operand("a", NUMBER), operand("b", like="a"))
    results, attributes = (result("y", like="a"),), ()

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("elementwise", {"op": cls.op_type.lower()})


@register
class Add(_Binary):
    op_type = "ADD"
    vector_opcode = VeAddTile
    epilogue = True


@register
class Mul(_Binary):
    op_type = "MUL"
    vector_opcode = VeMulTile


@register
class Elementwise(IrOp):
    """`op` (an `elementwise.EwKind`) on one to three inputs, broadcast; `cast` to `to`."""

    op_type = "ELEMENTWISE"
    #: any kind's most general signature; a node is held to its kind's (`node_signature`)
    operands = (operand("x"), var_operand("more"))
    results = (result("y"),)
    #: `op` and `to`, then every kind's ONNX attributes (`node_attr_defs`: a node's own
    #: kind's only); left out, a kind's kernel takes its ONNX default
    attributes = (attr("op", str, help="the kind (`ew_kind.EW_KINDS`)"),
                  attr("to", str | None, None, "cast: the element type cast to"),
                  *onnx_attr_defs())
    vector_opcode = VeElementwiseTile

    @classmethod
    def kind(cls, node: LayerIR) -> str:
        return cls.attrs(node).op

    @classmethod
    def node_attr_defs(cls, node: LayerIR) -> dict[str, Attr]:
        """`op`, `to` for a cast, and the ONNX attributes of the node's kind."""
        kind = EW_KINDS.get(node.attributes.get("op"))
        own = {"op", "to"} if node.attributes.get("op") == "cast" else {"op"}
        own.update(a.name for a in (kind.onnx_attrs if kind else ()))
        return {k: d for k, d in cls.attr_defs.items() if k in own}

    @classmethod
    def node_signature(cls, node: LayerIR) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """The signature of the node's kind (`EwKind.signature`); an unknown kind is held
        to the general one (the shape rule refuses it)."""
        kind = EW_KINDS.get(node.attributes.get("op"))
        return kind.signature() if kind else (cls.operands, cls.results)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """A cast names the element type it casts to: its output's."""
        if a.op != "cast":
            return
        try:
            same = a.to is not None and dtype(a.to).name == dtype(outs[0].dtype).name
        except (TypeError, ValueError):
            rules.fail("to", f"{a.to!r} is not an element type")
        if not same:
            rules.fail("to", f"{a.to!r} but the output is {outs[0].dtype}")

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        kind = cls.kind(node)
        if kind not in EW_KINDS:
            raise OpRuleError(f"unknown ELEMENTWISE op {kind!r} (no kind class, no cost)")
        if len(ins) >= 2 and kind != "cast":
            check_broadcast(ins, outs)
        elif len(ins) == 1:
            check_same(ins, outs)

    @classmethod
    def cost_of(cls, node: LayerIR) -> str:
        return EW_KINDS[cls.kind(node)].cost

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        # the attributes the node carries (cast's `to`, alpha, fmod, ...) are kernel params;
        # one it leaves out is the kernel's own default
        a = cls.attrs(node)
        params: dict[str, Any] = {"op": a.op}
        params.update({k: getattr(a, k) for k in node.attributes
                       if k != "op" and k in cls.attr_defs})
        return LayerCall("elementwise", params)


@register
class Rope(IrOp):
    op_type = "ROPE"
    operands = (*_X, operand("cos", like="x"), operand("sin", like="x"))
    results = _Y
    attributes = (
        attr("interleaved", bool, False, "rotate pairs (2i, 2i+1) instead of halves"),
        attr("rotary_dim", int | None, None, "the leading dims rotated (None: all)"),
    )
    shape = "same"
    kernel = "rope"

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """`rotary_dim`: an even number of the last axis's dims."""
        d = ins[0].shape[-1]
        if a.rotary_dim is not None and not (0 < a.rotary_dim <= d and a.rotary_dim % 2 == 0):
            rules.fail("rotary_dim", f"{a.rotary_dim} is not an even size of 2 to {d} (the "
                       "last axis)")
    vector_opcode = VeRopeTile


@register
class Reduce(IrOp):
    op_type = "REDUCE"
    operands, results = (operand("x", NUMBER | BOOL),), (result("y", like="x"),)
    attributes = (
        attr("op", str, help="sum, mean, max, min, prod, argmax, ... (`numerics` reduce)"),
        attr("axes", list[int], help="the reduced axes"),
        attr("keepdims", bool, help="the reduced axes stay, of size 1"),
        attr("select_last_index", bool, False, "argmax / argmin: the last of equal values"),
    )
    kernel = "reduce"
    kernel_attrs = ("op", "axes", "keepdims", "select_last_index")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axes_in("axes", a.axes, rules.rank(ins[0]))
    vector_opcode = VeReduceTile
    #: argmax / argmin give int64 indices; the other reductions the input's type
    _INDICES = (result("y", one_of("int64")),)

    @classmethod
    def node_signature(cls, node: LayerIR) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        arg = node.attributes.get("op") in ("argmax", "argmin")
        return cls.operands, cls._INDICES if arg else cls.results


@register
class Cumsum(IrOp):
    op_type = "CUMSUM"
    operands = (operand("x", NUMBER, rank=(1, None)),)
    results = _Y
    attributes = (_AXIS,
                  attr("exclusive", bool, False, "each sum leaves out its own element"),
                  attr("reverse", bool, False, "sum from the end"))
    shape = "same"
    kernel = "cumsum"
    kernel_attrs = ("axis", "exclusive", "reverse")
    constraints = classmethod(rules.axis_of_input)
    vector_opcode = VeCumsumTile


@register
class Pool(IrOp):
    """Max / average pooling. Run whole, it is priced as a sum per element (its tiles,
    VE_POOL_TILE, by the window maximum)."""

    op_type = "POOL"
    operands, results = (operand("x", NUMBER, rank=(3, None)),), _Y
    attributes = (
        attr("mode", str, help="the window's maximum or mean", values=("max", "avg")),
        attr("kernel_shape", list[int], help="the window's spatial shape"),
        attr("strides", list[int], help="the step per spatial axis"),
        attr("pads", list[int], help="the padding, every axis's begin then every axis's end"),
        attr("dilations", list[int], help="the window dilation per spatial axis"),
        attr("ceil_mode", bool, help="the output size rounds up"),
        attr("count_include_pad", bool, help="avg: padded elements count in the mean"),
    )
    kernel = "pool"
    kernel_attrs = ("mode", "kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                    "count_include_pad")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.window(a, rules.rank(ins[0]), kernel=a.kernel_shape)
    vector_opcode = VePoolTile
    layer_cost = "sum"


@register
class GroupNorm(IrOp):
    op_type = "GROUP_NORM"
    operands = (operand("x", FLOAT, rank=(2, None)), operand("scale", like="x", rank=1),
                operand("bias", like="x", rank=1))
    results = _Y
    attributes = (attr("groups", int, help="the channel groups normalized together"),
                  attr("eps", float, help="added to the variance"),
                  attr("per_channel_affine", bool, help="scale / bias per channel (else per "
                       "group)"))
    kernel = "group_norm"
    kernel_attrs = ("groups", "eps", "per_channel_affine")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.divides("groups", a.groups, ins[0].shape[1], "the channels")
    layer_cost = "copy"


@register
class LogSoftmax(IrOp):
    op_type = "LOG_SOFTMAX"
    operands, results, attributes = _X, _Y, (_AXIS,)
    kernel = "log_softmax"
    kernel_attrs = ("axis",)
    constraints = classmethod(rules.axis_of_input)
    layer_cost = "copy"


@register
class Hardmax(IrOp):
    op_type = "HARDMAX"
    operands, results, attributes = _X, _Y, (_AXIS,)
    kernel = "hardmax"
    kernel_attrs = ("axis",)
    constraints = classmethod(rules.axis_of_input)
    layer_cost = "copy"


@register
class TopK(IrOp):
    op_type = "TOPK"
    operands = (operand("x", NUMBER, rank=(1, None)),)
    results = (result("values", like="x"), result("indices", one_of("int64")))
    attributes = (attr("k", int, help="how many"), _AXIS,
                  attr("largest", bool, help="the largest (else the smallest)"),
                  attr("sorted", bool, help="in order"))
    kernel = "topk"
    kernel_attrs = ("k", "axis", "largest", "sorted")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))
        rules.at_least("k", a.k, 0)
    layer_cost = "copy"


@register
class Einsum(IrOp):
    op_type = "EINSUM"
    operands, results = (var_operand("x", NUMBER, like="x"),), _Y
    attributes = (attr("equation", str, help="the einsum equation, no spaces"),)
    kernel = "einsum"
    kernel_attrs = ("equation",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """One term of the equation per input."""
        terms = a.equation.split("->")[0].split(",")
        rules.length("equation", terms, len(ins), "one term per input")
    layer_cost = "copy"
