"""The vector-engine ops: norms, softmax, activations, ADD / MUL, ELEMENTWISE, ROPE, the
reductions and windows. Each names the vector opcode its tiles become; its whole-layer
cost is that opcode's `cost_op` unless it names one."""

from __future__ import annotations

from typing import Any, ClassVar

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
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import elementwise, elementwise_extra  # noqa: F401  (register the kinds)
from kernbench.ir.ops.base import (
    IrOp,
    LayerCall,
    OpRuleError,
    QuantState,
    Shape,
    check_broadcast,
    check_same,
    register,
)
from kernbench.ir.ops.ew_kind import EW_KINDS, onnx_attr_names

#: every ONNX attribute an ELEMENTWISE kind's kernel takes (the layer attributes that
#: are kernel params)
EW_ATTRS = onnx_attr_names()


@register
class LayerNorm(IrOp):
    op_type = "LAYER_NORM"
    shape = "same"
    kernel = "layernorm"
    kernel_attrs = ("axis", "eps")
    vector_opcode = VeLayernormTile
    row_wise = True


@register
class RmsNorm(IrOp):
    op_type = "RMS_NORM"
    shape = "same"
    kernel = "rmsnorm"
    kernel_attrs = ("axis", "eps")
    vector_opcode = VeRmsnormTile
    row_wise = True


@register
class Softmax(IrOp):
    op_type = "SOFTMAX"
    shape = "same"
    kernel = "softmax"
    kernel_attrs = ("axis",)
    vector_opcode = VeSoftmaxTile
    row_wise = True


@register
class Gelu(IrOp):
    op_type = "GELU"
    shape = "same"
    kernel = "gelu"
    kernel_defaults: ClassVar[dict[str, Any]] = {"approximate": "none"}
    vector_opcode = VeGeluTile
    row_wise = True
    epilogue = True


@register
class Silu(IrOp):
    op_type = "SILU"
    shape = "same"
    kernel = "silu"
    vector_opcode = VeSiluTile
    row_wise = True
    epilogue = True


class _Binary(IrOp):
    shape = "broadcast"
    row_wise = True

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
    vector_opcode = VeElementwiseTile

    @classmethod
    def kind(cls, node: LayerIR) -> str:
        return node.attributes.get("op")

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
        # the ONNX attributes the importer keeps (cast's `to`, alpha, fmod, ...) are kernel
        # params; other keys (passes' annotations) are not
        params: dict[str, Any] = {"op": cls.kind(node)}
        params.update({k: v for k, v in node.attributes.items() if k == "to" or k in EW_ATTRS})
        return LayerCall("elementwise", params)


@register
class Rope(IrOp):
    op_type = "ROPE"
    shape = "same"
    kernel = "rope"
    vector_opcode = VeRopeTile


@register
class Reduce(IrOp):
    op_type = "REDUCE"
    kernel = "reduce"
    kernel_attrs = ("op", "axes", "keepdims")
    kernel_defaults: ClassVar[dict[str, Any]] = {"select_last_index": False}
    vector_opcode = VeReduceTile


@register
class Cumsum(IrOp):
    op_type = "CUMSUM"
    shape = "same"
    kernel = "cumsum"
    kernel_attrs = ("axis", "exclusive", "reverse")
    vector_opcode = VeCumsumTile


@register
class Pool(IrOp):
    """Max / average pooling. Run whole, it is priced as a sum per element (its tiles,
    VE_POOL_TILE, by the window maximum)."""

    op_type = "POOL"
    kernel = "pool"
    kernel_attrs = ("mode", "kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                    "count_include_pad")
    vector_opcode = VePoolTile
    layer_cost = "sum"


@register
class GroupNorm(IrOp):
    op_type = "GROUP_NORM"
    kernel = "group_norm"
    kernel_attrs = ("groups", "eps", "per_channel_affine")
    layer_cost = "copy"


@register
class LogSoftmax(IrOp):
    op_type = "LOG_SOFTMAX"
    kernel = "log_softmax"
    kernel_attrs = ("axis",)
    layer_cost = "copy"


@register
class Hardmax(IrOp):
    op_type = "HARDMAX"
    kernel = "hardmax"
    kernel_attrs = ("axis",)
    layer_cost = "copy"


@register
class TopK(IrOp):
    op_type = "TOPK"
    kernel = "topk"
    kernel_attrs = ("k", "axis", "largest", "sorted")
    layer_cost = "copy"


@register
class Einsum(IrOp):
    op_type = "EINSUM"
    kernel = "einsum"
    kernel_attrs = ("equation",)
    layer_cost = "copy"
