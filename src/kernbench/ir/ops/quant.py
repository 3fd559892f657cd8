"""The quantization ops: QUANTIZE / DEQUANTIZE / QDQ (static parameters), DYNAMIC_QUANTIZE,
and the integer ONNX forms that run on the tensor engine (MATMUL_INTEGER, QLINEAR_MATMUL,
QLINEAR_CONV, CONV_INTEGER)."""

from __future__ import annotations

from typing import Any

from kernbench.cmdq.opcodes.ve_quant import VeDequantizeTile, VeQuantizeTile
from kernbench.ir.model import LayerIR, TensorIR
from kernbench.ir.ops import rules
from kernbench.ir.ops.base import AttrView, IrOp, LayerCall, QuantState, register
from kernbench.ir.ops.defs import FLOAT, INT, INT8, attr, one_of, operand, opt_operand, result
from kernbench.ir.ops.te import CONV_ATTRS, TensorEngineOp, conv_constraints
from kernbench.numerics.dtypes import dtype

#: the integer element types a QUANTIZE / QDQ stores
QDTYPES = ("int2", "int4", "int8", "int16", "uint2", "uint4", "uint8", "uint16")
_QPARAMS = (
    attr("axis", int | None, None, "the per-channel axis (None: one scale per tensor)"),
    attr("block_size", int, 0, "the rows per scale along axis (0: not blocked)"),
)
_DTYPE = attr("dtype", str, help="the integer type", values=QDTYPES)
_U8, _I32 = one_of("uint8"), one_of("int32")


class _Linear(IrOp):
    """A static quantization step: x, its scale and zero point (constants)."""

    operands = (operand("x", FLOAT), operand("scale", FLOAT), opt_operand("zero_point", INT))
    results = (result("y", INT, like="zero_point"),)
    attributes = (_DTYPE, *_QPARAMS)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """`axis` within the rank, and set when blocked; a QUANTIZE stores its `dtype`."""
        if a.axis is not None:
            rules.axis_in("axis", a.axis, rules.rank(ins[0]))
        rules.at_least("block_size", a.block_size, 0)
        if a.block_size and a.axis is None:
            rules.fail("block_size", f"{a.block_size} without an axis to block along")
        stored = outs[0] if cls.op_type == "QUANTIZE" else None
        if stored is not None and dtype(stored.dtype).name != dtype(a.dtype).name:
            rules.fail("dtype", f"{a.dtype} but the output is {stored.dtype}")


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
    operands = (operand("x", INT), operand("scale", FLOAT),
                opt_operand("zero_point", like="x"))
    results = (result("y", FLOAT, like="scale"),)
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
    results = (result("y", like="x"),)
    shape = "same"
    vector_opcode = VeQuantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = cls.attrs(node)
        return LayerCall("qdq", {**_qbits(a), **_qparams(a)})


@register
class DynamicQuantize(IrOp):
    op_type = "DYNAMIC_QUANTIZE"
    operands = (operand("x", FLOAT),)
    results = (result("y", _U8), result("scale", FLOAT, rank=0),
               result("zero_point", _U8, rank=0))
    attributes = ()
    kernel = "dynamic_quantize"
    vector_opcode = VeQuantizeTile


@register
class MatmulInteger(TensorEngineOp):
    op_type = "MATMUL_INTEGER"
    operands = (operand("a", INT8, rank=(1, None)), operand("b", INT8, rank=(1, None)),
                opt_operand("a_zero_point", like="a"), opt_operand("b_zero_point", like="b"))
    results = (result("y", _I32),)
    kernel = "matmul_integer"


@register
class QlinearMatmul(TensorEngineOp):
    op_type = "QLINEAR_MATMUL"
    operands = (operand("a", INT8, rank=(1, None)), operand("a_scale", FLOAT),
                operand("a_zero_point", like="a"), operand("b", INT8, rank=(1, None)),
                operand("b_scale", FLOAT), operand("b_zero_point", like="b"),
                operand("y_scale", FLOAT), operand("y_zero_point", INT8))
    results = (result("y", like="y_zero_point"),)
    kernel = "qlinear_matmul"


@register
class QlinearConv(TensorEngineOp):
    op_type = "QLINEAR_CONV"
    operands = (operand("x", INT8, rank=(3, None)), operand("x_scale", FLOAT),
                operand("x_zero_point", like="x"), operand("w", INT8, rank=(3, None)),
                operand("w_scale", FLOAT), operand("w_zero_point", like="w"),
                operand("y_scale", FLOAT), operand("y_zero_point", INT8),
                opt_operand("bias", _I32, rank=1))
    results = (result("y", like="y_zero_point"),)
    attributes = CONV_ATTRS
    kernel = "qlinear_conv"
    kernel_attrs = ("strides", "pads", "dilations", "group")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        conv_constraints(a, ins[0], ins[3])


@register
class ConvInteger(TensorEngineOp):
    op_type = "CONV_INTEGER"
    operands = (operand("x", INT8, rank=(3, None)), operand("w", INT8, rank=(3, None)),
                opt_operand("x_zero_point", like="x"), opt_operand("w_zero_point", like="w"))
    results = (result("y", _I32),)
    attributes = CONV_ATTRS
    kernel = "conv_integer"
    kernel_attrs = ("strides", "pads", "dilations", "group")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        conv_constraints(a, ins[0], ins[1])
