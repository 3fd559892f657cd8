"""The ELEMENTWISE kinds of the ONNX core math ops (their numerics functions are
`numerics.elementwise.UNARY_FNS` / `BINARY_FNS`, `where`, `max`, `min`, `clip`, `cast`),
one class each (`ew_kind.EwKind`)."""

from __future__ import annotations

from kernbench.ir.ops.ew_kind import EwKind, register_kind


@register_kind
class Sqrt(EwKind):
    kind = "sqrt"
    onnx = ("Sqrt",)
    cost = "sqrt"


@register_kind
class Reciprocal(EwKind):
    kind = "reciprocal"
    onnx = ("Reciprocal",)
    cost = "div"


@register_kind
class Neg(EwKind):
    kind = "neg"
    onnx = ("Neg",)
    cost = "copy"


@register_kind
class Erf(EwKind):
    kind = "erf"
    onnx = ("Erf",)
    cost = "erf"


@register_kind
class Tanh(EwKind):
    kind = "tanh"
    onnx = ("Tanh",)
    cost = "tanh"


@register_kind
class Sigmoid(EwKind):
    kind = "sigmoid"
    onnx = ("Sigmoid",)
    cost = "sigmoid"


@register_kind
class Exp(EwKind):
    kind = "exp"
    onnx = ("Exp",)
    cost = "exp"


@register_kind
class Log(EwKind):
    kind = "log"
    onnx = ("Log",)
    cost = "log"


@register_kind
class Abs(EwKind):
    kind = "abs"
    onnx = ("Abs",)
    cost = "copy"


@register_kind
class Relu(EwKind):
    kind = "relu"
    onnx = ("Relu",)
    cost = "copy"


@register_kind
class Isnan(EwKind):
    kind = "isnan"
    onnx = ("IsNaN",)
    cost = "copy"


@register_kind
class Not(EwKind):
    kind = "not"
    onnx = ("Not",)
    cost = "copy"


@register_kind
class Cos(EwKind):
    kind = "cos"
    onnx = ("Cos",)
    cost = "copy"


@register_kind
class Sin(EwKind):
    kind = "sin"
    onnx = ("Sin",)
    cost = "copy"


@register_kind
class Floor(EwKind):
    kind = "floor"
    onnx = ("Floor",)
    cost = "copy"


@register_kind
class Ceil(EwKind):
    kind = "ceil"
    onnx = ("Ceil",)
    cost = "copy"


@register_kind
class Add(EwKind):
    kind = "add"
    onnx = ("Add",)
    ir_op = "ADD"
    cost = "add"


@register_kind
class Sub(EwKind):
    kind = "sub"
    onnx = ("Sub",)
    cost = "sub"


@register_kind
class Mul(EwKind):
    kind = "mul"
    onnx = ("Mul",)
    ir_op = "MUL"
    cost = "mul"


@register_kind
class Div(EwKind):
    kind = "div"
    onnx = ("Div",)
    cost = "div"


@register_kind
class Pow(EwKind):
    kind = "pow"
    onnx = ("Pow",)
    cost = "exp"


@register_kind
class Equal(EwKind):
    kind = "equal"
    onnx = ("Equal",)
    cost = "copy"


@register_kind
class Less(EwKind):
    kind = "less"
    onnx = ("Less",)
    cost = "copy"


@register_kind
class Greater(EwKind):
    kind = "greater"
    onnx = ("Greater",)
    cost = "copy"


@register_kind
class And(EwKind):
    kind = "and"
    onnx = ("And",)
    cost = "copy"


@register_kind
class Or(EwKind):
    kind = "or"
    onnx = ("Or",)
    cost = "copy"


@register_kind
class LessEqual(EwKind):
    kind = "less_equal"
    onnx = ("LessOrEqual",)
    cost = "copy"


@register_kind
class GreaterEqual(EwKind):
    kind = "greater_equal"
    onnx = ("GreaterOrEqual",)
    cost = "copy"


@register_kind
class Where(EwKind):
    kind = "where"
    onnx = ("Where",)
    cost = "where"


@register_kind
class Max(EwKind):
    kind = "max"
    onnx = ("Max",)
    cost = "max"


@register_kind
class Min(EwKind):
    kind = "min"
    onnx = ("Min",)
    cost = "min"


@register_kind
class Clip(EwKind):
    kind = "clip"
    cost = "copy"


@register_kind
class Cast(EwKind):
    kind = "cast"
    cost = "cast"
