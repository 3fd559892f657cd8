"""The ELEMENTWISE kinds of the further ONNX math ops (trigonometric, activations with
attributes, bit and modulo ops; their numerics functions are `numerics.unary_extra`), one
class each (`ew_kind.EwKind`)."""

from __future__ import annotations

from kernbench.ir.ops.defs import BOOL, INT, NUMBER
from kernbench.ir.ops.ew_kind import EwKind, onnx_attr, register_kind

#: the inputs of a two-input kind (both of one element type)
_BINARY = ("a", "b")

_ALPHA = onnx_attr("alpha", float)


@register_kind
class Round(EwKind):
    kind = "round"
    onnx = ("Round",)
    cost = "copy"


@register_kind
class Sign(EwKind):
    kind = "sign"
    onnx = ("Sign",)
    cost = "copy"
    takes = NUMBER


@register_kind
class Tan(EwKind):
    kind = "tan"
    onnx = ("Tan",)
    cost = "copy"


@register_kind
class Asin(EwKind):
    kind = "asin"
    onnx = ("Asin",)
    cost = "copy"


@register_kind
class Acos(EwKind):
    kind = "acos"
    onnx = ("Acos",)
    cost = "copy"


@register_kind
class Atan(EwKind):
    kind = "atan"
    onnx = ("Atan",)
    cost = "copy"


@register_kind
class Sinh(EwKind):
    kind = "sinh"
    onnx = ("Sinh",)
    cost = "copy"


@register_kind
class Cosh(EwKind):
    kind = "cosh"
    onnx = ("Cosh",)
    cost = "copy"


@register_kind
class Asinh(EwKind):
    kind = "asinh"
    onnx = ("Asinh",)
    cost = "copy"


@register_kind
class Acosh(EwKind):
    kind = "acosh"
    onnx = ("Acosh",)
    cost = "copy"


@register_kind
class Atanh(EwKind):
    kind = "atanh"
    onnx = ("Atanh",)
    cost = "copy"


@register_kind
class Softplus(EwKind):
    kind = "softplus"
    onnx = ("Softplus",)
    cost = "copy"


@register_kind
class Softsign(EwKind):
    kind = "softsign"
    onnx = ("Softsign",)
    cost = "copy"


@register_kind
class HardSigmoid(EwKind):
    kind = "hard_sigmoid"
    onnx = ("HardSigmoid",)
    onnx_attrs = (_ALPHA, onnx_attr("beta", float))
    cost = "copy"


@register_kind
class HardSwish(EwKind):
    kind = "hard_swish"
    onnx = ("HardSwish",)
    cost = "copy"


@register_kind
class Mish(EwKind):
    kind = "mish"
    onnx = ("Mish",)
    cost = "copy"


@register_kind
class Selu(EwKind):
    kind = "selu"
    onnx = ("Selu",)
    onnx_attrs = (_ALPHA, onnx_attr("gamma", float))
    cost = "copy"


@register_kind
class Elu(EwKind):
    kind = "elu"
    onnx = ("Elu",)
    onnx_attrs = (_ALPHA,)
    cost = "copy"


@register_kind
class Celu(EwKind):
    kind = "celu"
    onnx = ("Celu",)
    onnx_attrs = (_ALPHA,)
    cost = "copy"


@register_kind
class LeakyRelu(EwKind):
    kind = "leaky_relu"
    onnx = ("LeakyRelu",)
    onnx_attrs = (_ALPHA,)
    cost = "copy"


@register_kind
class ThresholdedRelu(EwKind):
    kind = "thresholded_relu"
    onnx = ("ThresholdedRelu",)
    onnx_attrs = (_ALPHA,)
    cost = "copy"


@register_kind
class Prelu(EwKind):
    kind = "prelu"
    onnx = ("PRelu",)
    cost = "copy"
    inputs = ("x", "slope")
    takes = NUMBER


@register_kind
class Shrink(EwKind):
    kind = "shrink"
    onnx = ("Shrink",)
    onnx_attrs = (onnx_attr("lambd", float), onnx_attr("bias", float))
    cost = "copy"
    takes = NUMBER


@register_kind
class Mod(EwKind):
    kind = "mod"
    onnx = ("Mod",)
    onnx_attrs = (onnx_attr("fmod", int),)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER


@register_kind
class Isinf(EwKind):
    kind = "isinf"
    onnx = ("IsInf",)
    onnx_attrs = (onnx_attr("detect_negative", int), onnx_attr("detect_positive", int))
    cost = "copy"
    gives = BOOL


@register_kind
class Xor(EwKind):
    kind = "xor"
    onnx = ("Xor",)
    cost = "copy"
    inputs = _BINARY
    takes = BOOL


@register_kind
class Sum(EwKind):
    kind = "sum"
    onnx = ("Sum",)
    cost = "copy"
    variadic = True


@register_kind
class Mean(EwKind):
    kind = "mean"
    onnx = ("Mean",)
    cost = "copy"
    variadic = True


@register_kind
class Bitshift(EwKind):
    kind = "bitshift"
    onnx = ("BitShift",)
    onnx_attrs = (onnx_attr("direction", str),)
    cost = "copy"
    inputs = _BINARY
    takes = INT


@register_kind
class BitwiseAnd(EwKind):
    kind = "bitwise_and"
    onnx = ("BitwiseAnd",)
    cost = "copy"
    inputs = _BINARY
    takes = INT


@register_kind
class BitwiseOr(EwKind):
    kind = "bitwise_or"
    onnx = ("BitwiseOr",)
    cost = "copy"
    inputs = _BINARY
    takes = INT


@register_kind
class BitwiseXor(EwKind):
    kind = "bitwise_xor"
    onnx = ("BitwiseXor",)
    cost = "copy"
    inputs = _BINARY
    takes = INT


@register_kind
class BitwiseNot(EwKind):
    kind = "bitwise_not"
    onnx = ("BitwiseNot",)
    cost = "copy"
    takes = INT

