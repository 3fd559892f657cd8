"""The quantization ops: QUANTIZE / DEQUANTIZE / QDQ (static parameters), DYNAMIC_QUANTIZE,
and the integer ONNX forms that run on the tensor engine (MATMUL_INTEGER, QLINEAR_MATMUL,
QLINEAR_CONV, CONV_INTEGER)."""

from __future__ import annotations

from typing import Any

from kernbench.cmdq.opcodes.ve_quant import VeDequantizeTile, VeQuantizeTile
from kernbench.ir.model import LayerIR
from kernbench.ir.ops.base import IrOp, LayerCall, QuantState, register
from kernbench.ir.ops.defs import attr, operand, opt_operand, result
from kernbench.ir.ops.te import CONV_ATTRS, TensorEngineOp

#: the integer element types a QUANTIZE / QDQ stores
QDTYPES = ("int2", "int4", "int8", "int16", "uint2", "uint4", "uint8", "uint16")
_QPARAMS = (
    attr("axis", int | None, None, "the per-channel axis (None: one scale per tensor)"),
    attr("block_size", int, 0, "the rows per scale along axis (0: not blocked)"),
)
_DTYPE = attr("dtype", str, help="the integer type", values=QDTYPES)


class _Linear(IrOp):
    """A static quantization step: x, its scale and zero point (constants)."""

    operands = (operand("x"), operand("scale"), opt_operand("zero_point"))
    results = (result("y"),)
    attributes = (_DTYPE, *_QPARAMS)


def _qparams(a: object) -> dict[str, Any]:
    return {"axis": a.axis, "block_size": a.block_size}


def _qbits(a: object) -> dict[str, Any]:
    return {"bits": int(a.dtype.lstrip("uint")), "signed": not a.dtype.startswith("u")}


@register
class Quantize(_Linear):
    op_type = "QUANTIZE"
    shape = "same"
    vector_opcode = VeQuantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = cls.attrs(node)
        return LayerCall("quantize", {**_qbits(a), **_qparams(a)})


@register
class Dequantize(_Linear):
    op_type = "DEQUANTIZE"
    attributes = _QPARAMS  # the stored type is the input's
    shape = "same"
    vector_opcode = VeDequantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("dequantize", _qparams(cls.attrs(node)))


@register
class Qdq(_Linear):
    """A quantize-dequantize pair kept as one layer."""

    op_type = "QDQ"
    shape = "same"
    vector_opcode = VeQuantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = cls.attrs(node)
        return LayerCall("qdq", {**_qbits(a), **_qparams(a)})


@register
class DynamicQuantize(IrOp):
    op_type = "DYNAMIC_QUANTIZE"
    operands = (operand("x"),)
    results = (result("y"), result("scale"), result("zero_point"))
    attributes = ()
    kernel = "dynamic_quantize"
    vector_opcode = VeQuantizeTile


@register
class MatmulInteger(TensorEngineOp):
    op_type = "MATMUL_INTEGER"
    operands = (operand("a"), operand("b"), opt_operand("a_zero_point"),
                opt_operand("b_zero_point"))
    kernel = "matmul_integer"


@register
class QlinearMatmul(TensorEngineOp):
    op_type = "QLINEAR_MATMUL"
    operands = tuple(operand(n) for n in ("a", "a_scale", "a_zero_point", "b", "b_scale",
                                          "b_zero_point", "y_scale", "y_zero_point"))
    kernel = "qlinear_matmul"


@register
class QlinearConv(TensorEngineOp):
    op_type = "QLINEAR_CONV"
    operands = (*(operand(n) for n in ("x", "x_scale", "x_zero_point", "w", "w_scale",
                                       "w_zero_point", "y_scale", "y_zero_point")),
                opt_operand("bias"))
    attributes = CONV_ATTRS
    kernel = "qlinear_conv"
    kernel_attrs = ("strides", "pads", "dilations", "group")


@register
class ConvInteger(TensorEngineOp):
    op_type = "CONV_INTEGER"
    operands = (operand("x"), operand("w"), opt_operand("x_zero_point"),
                opt_operand("w_zero_point"))
    attributes = CONV_ATTRS
    kernel = "conv_integer"
    kernel_attrs = ("strides", "pads", "dilations", "group")
