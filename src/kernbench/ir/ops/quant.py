"""The quantization ops: QUANTIZE / DEQUANTIZE / QDQ (static parameters), DYNAMIC_QUANTIZE,
and the integer ONNX forms that run on the tensor engine (MATMUL_INTEGER, QLINEAR_MATMUL,
QLINEAR_CONV, CONV_INTEGER)."""

from __future__ import annotations

from typing import Any

from kernbench.cmdq.opcodes.ve_quant import VeDequantizeTile, VeQuantizeTile
from kernbench.ir.model import LayerIR
from kernbench.ir.ops.base import IrOp, LayerCall, QuantState, register
from kernbench.ir.ops.te import TensorEngineOp


def _qparams(n: LayerIR) -> dict[str, Any]:
    return {"axis": n.attributes.get("axis"), "block_size": n.attributes.get("block_size", 0)}


def _qbits(n: LayerIR) -> dict[str, Any]:
    dt = n.attributes["dtype"]
    return {"bits": int(dt.lstrip("uint")), "signed": not dt.startswith("u")}


@register
class Quantize(IrOp):
    op_type = "QUANTIZE"
    shape = "same"
    vector_opcode = VeQuantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("quantize", {**_qbits(node), **_qparams(node)})


@register
class Dequantize(IrOp):
    op_type = "DEQUANTIZE"
    shape = "same"
    vector_opcode = VeDequantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("dequantize", _qparams(node))


@register
class Qdq(IrOp):
    """A quantize-dequantize pair kept as one layer."""

    op_type = "QDQ"
    shape = "same"
    vector_opcode = VeQuantizeTile

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        return LayerCall("qdq", {**_qbits(node), **_qparams(node)})


@register
class DynamicQuantize(IrOp):
    op_type = "DYNAMIC_QUANTIZE"
    kernel = "dynamic_quantize"
    vector_opcode = VeQuantizeTile


@register
class MatmulInteger(TensorEngineOp):
    op_type = "MATMUL_INTEGER"
    kernel = "matmul_integer"


@register
class QlinearMatmul(TensorEngineOp):
    op_type = "QLINEAR_MATMUL"
    kernel = "qlinear_matmul"


@register
class QlinearConv(TensorEngineOp):
    op_type = "QLINEAR_CONV"
    kernel = "qlinear_conv"
    kernel_attrs = ("strides", "pads", "dilations", "group")


@register
class ConvInteger(TensorEngineOp):
    op_type = "CONV_INTEGER"
    kernel = "conv_integer"
    kernel_attrs = ("strides", "pads", "dilations", "group")
