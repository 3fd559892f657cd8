"""The kinds of the IR's ELEMENTWISE op (its `op` attribute), one class each: the ONNX op
types imported as it, the ONNX attributes its numerics kernel takes, its inputs and their
element types (`signature`: the node's operands and result, which the verifier holds it
to), and the pe_math cost-table entry that prices one output element of it on the vector
engine.

The numerics function of a kind is `kernbench.numerics.elementwise.elementwise(op=kind)`
(`UNARY_FNS`, `BINARY_FNS`, `unary_extra.EXTRA_FNS`). A kind is refused when its class is
defined if its cost names no pe_math entry, and the verifier refuses an ELEMENTWISE whose
kind has no class: no kind is priced as a copy by default. A kind priced `copy` is one
whose vector-engine cost is one pass per element (a compare, a logical or bit op, a sign
or rounding step) or one the cost table has no entry of its own for yet.
"""

from __future__ import annotations

from typing import ClassVar

from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES
from kernbench.ir.ops.defs import (
    FLOAT,
    Attr,
    Operand,
    Types,
    attr,
    operand,
    result,
    var_operand,
)


class EwKind:
    """One ELEMENTWISE kind (see the module docstring)."""

    kind: ClassVar[str]
    #: the ONNX op types the importer turns into this kind
    onnx: ClassVar[tuple[str, ...]] = ()
    #: the ONNX attributes the numerics kernel takes (kept as layer attributes when the
    #: ONNX node sets them; `onnx_attr`)
    onnx_attrs: ClassVar[tuple[Attr, ...]] = ()
    #: the IR op an ONNX node of this kind becomes (ADD and MUL have their own)
    ir_op: ClassVar[str] = "ELEMENTWISE"
    cost: ClassVar[str]
    #: the names of its inputs; every one has the first's element type, one of `takes`
    inputs: ClassVar[tuple[str, ...]] = ("x",)
    takes: ClassVar[Types] = FLOAT
    #: any number of further inputs of the first's type follow (sum, mean, max, min)
    variadic: ClassVar[bool] = False
    #: the output's element types (None: the first input's)
    gives: ClassVar[Types | None] = None
    #: `signature()`, computed once per kind
    declared: ClassVar[tuple[tuple[Operand, ...], tuple[Operand, ...]]]

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if getattr(cls, "cost", None) not in DEFAULT_MATH_OP_CYCLES:
            raise TypeError(f"ELEMENTWISE kind {cls.__name__}: no pe_math cost "
                            f"({getattr(cls, 'cost', None)!r})")
        cls.declared = cls.signature()

    @classmethod
    def signature(cls) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """The operands and result of a node of this kind (`defs` declarations)."""
        first, *rest = cls.inputs
        ops = (operand(first, cls.takes), *(operand(n, like=first) for n in rest))
        if cls.variadic:
            ops = (*ops, var_operand("more", like=first))
        y = result("y", cls.gives) if cls.gives is not None else result("y", like=first)
        return ops, (y,)


EW_KINDS: dict[str, type[EwKind]] = {}
#: ONNX op type → the kind it imports as
BY_ONNX: dict[str, type[EwKind]] = {}


def register_kind(cls: type[EwKind]) -> type[EwKind]:
    if cls.kind in EW_KINDS:
        raise TypeError(f"ELEMENTWISE kind {cls.kind} registered twice")
    EW_KINDS[cls.kind] = cls
    for o in cls.onnx:
        BY_ONNX[o] = cls
    return cls


def onnx_attr(name: str, type_: object) -> Attr:
    """An ONNX attribute of a kind: of `type_` when the node carries it; left out, the
    numerics kernel takes the ONNX default."""
    return attr(name, type_ | None, None, f"the ONNX attribute {name} (left out: its "
                "ONNX default)")


def onnx_attr_defs() -> tuple[Attr, ...]:
    """Every ONNX attribute a registered kind's kernel takes, in first-declared order; a
    name two kinds declare has one type."""
    out: dict[str, Attr] = {}
    for k in EW_KINDS.values():
        for a in k.onnx_attrs:
            if out.setdefault(a.name, a).type != a.type:
                raise TypeError(f"ELEMENTWISE attribute {a.name}: two types")
    return tuple(out.values())


def onnx_attr_names() -> tuple[str, ...]:
    """The names of `onnx_attr_defs`."""
    return tuple(a.name for a in onnx_attr_defs())
