"""The ELEMENTWISE kinds of the ONNX core math ops (their numerics functions are
`numerics.elementwise.UNARY_FNS` / `BINARY_FNS`, `where`, `max`, `min`, `clip`, `cast`),
one class each (`ew_kind.EwKind`)."""

from __future__ import annotations

from kernbench.ir.ops.defs import BOOL, NUMBER, Operand, operand, result
from kernbench.ir.ops.ew_kind import EwKind, register_kind

#: the inputs of a two-input kind (both of one element type)
_BINARY = ("a", "b")


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
    takes = NUMBER


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
    takes = NUMBER


@register_kind
class Relu(EwKind):
    kind = "relu"
    onnx = ("Relu",)
    cost = "copy"
    takes = NUMBER


@register_kind
class Isnan(EwKind):
    kind = "isnan"
    onnx = ("IsNaN",)
    cost = "copy"
    gives = BOOL


@register_kind
class Not(EwKind):
    kind = "not"
    onnx = ("Not",)
    cost = "copy"
    takes = BOOL


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
    inputs = _BINARY
    takes = NUMBER


@register_kind
class Sub(EwKind):
    kind = "sub"
    onnx = ("Sub",)
    cost = "sub"
    inputs = _BINARY
    takes = NUMBER


@register_kind
class Mul(EwKind):
    kind = "mul"
    onnx = ("Mul",)
    ir_op = "MUL"
    cost = "mul"
    inputs = _BINARY
    takes = NUMBER


@register_kind
class Div(EwKind):
    kind = "div"
    onnx = ("Div",)
    cost = "div"
    inputs = _BINARY
    takes = NUMBER


@register_kind
class Pow(EwKind):
    kind = "pow"
    onnx = ("Pow",)
    cost = "exp"
    inputs = ("x", "exponent")
    takes = NUMBER

    @classmethod
    def signature(cls) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """The exponent's type is its own (an integer power of a float)."""
        return (operand("x", NUMBER), operand("exponent", NUMBER)), (result("y", like="x"),)


@register_kind
class Equal(EwKind):
    kind = "equal"
    onnx = ("Equal",)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER | BOOL
    gives = BOOL


@register_kind
class Less(EwKind):
    kind = "less"
    onnx = ("Less",)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER
    gives = BOOL


@register_kind
class Greater(EwKind):
    kind = "greater"
    onnx = ("Greater",)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER
    gives = BOOL


@register_kind
class And(EwKind):
    kind = "and"
    onnx = ("And",)
    cost = "copy"
    inputs = _BINARY
    takes = BOOL


@register_kind
class Or(EwKind):
    kind = "or"
    onnx = ("Or",)
    cost = "copy"
    inputs = _BINARY
    takes = BOOL


@register_kind
class LessEqual(EwKind):
    kind = "less_equal"
    onnx = ("LessOrEqual",)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER
    gives = BOOL


@register_kind
class GreaterEqual(EwKind):
    kind = "greater_equal"
    onnx = ("GreaterOrEqual",)
    cost = "copy"
    inputs = _BINARY
    takes = NUMBER
    gives = BOOL


@register_kind
class Where(EwKind):
    kind = "where"
    onnx = ("Where",)
    cost = "where"

    @classmethod
    def signature(cls) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """A bool condition chooses between two tensors of one (any) type."""
        return (operand("cond", BOOL), operand("a"), operand("b", like="a")), \
            (result("y", like="a"),)


@register_kind
class Max(EwKind):
    kind = "max"
    onnx = ("Max",)
    cost = "max"
    takes = NUMBER
    variadic = True


@register_kind
class Min(EwKind):
    kind = "min"
    onnx = ("Min",)
    cost = "min"
    takes = NUMBER
    variadic = True


@register_kind
class Clip(EwKind):
    kind = "clip"
    cost = "copy"
    inputs = ("x", "lo", "hi")
    takes = NUMBER


@register_kind
class Cast(EwKind):
    kind = "cast"
    cost = "cast"

    @classmethod
    def signature(cls) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """Any type to any type (the node's `to`)."""
        return (operand("x"),), (result("y"),)
