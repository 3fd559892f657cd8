"""What an IR op declares about a node, in the manner of xDSL's IRDL (`operand_def`,
`attr_def`): its operands and results (a name, an arity, the element types and ranks
its tensors may have) and its attributes (a name, a Python type, the allowed values,
required or a default, a help line).

* `operand(name, types, rank=, like=)` / `opt_operand` / `var_operand`: one input that
  is always there, one that may be left out (only at the end of the list, or as an empty
  id), any number of them. `result` / `var_result` declare the outputs the same way.
  `types` is a `Types` (`FLOAT`, `INT`, `BOOL`, `NUMBER`, `ANY`, `one_of("int8", ...)`,
  unions with `|`): the element types the tensor may have, by the numerics table (any
  spelling of one). `rank` is an exact rank or `(fewest, most)` (`None`: no most).
  `like` names another operand or result whose element type this one must have (IRDL's
  constraint variable: `b` of a MATMUL is `like="a"`).
* `attr(name, type, default, help, values=...)`: `type` is `int`, `float`, `bool`, `str`,
  `list[int]`, `list[float]`, `list[str]`, a union with `None` (`int | None`), or `Any`;
  an `int` is never a `bool`, a `float` may be written as an `int` (JSON drops the `.0`).
  No default (`REQUIRED`) means the node must carry it.

`count_problem` and `attr_problem` say what is wrong with a node, or None; `attrs_class`
builds the frozen dataclass an op's `attrs(node)` returns (the declared attributes, the
defaults applied).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from kernbench.numerics.dtypes import DTYPES, dtype

Arity = Literal["fixed", "optional", "variadic"]
#: an exact rank, or (fewest, most) with None for no most
Rank = int | tuple[int, int | None] | None


@dataclass(frozen=True)
class Types:
    """A set of element types (canonical numerics names) and how a message names it."""

    label: str
    names: frozenset[str]

    def __or__(self, other: Types) -> Types:
        return Types(f"{self.label} or {other.label}", self.names | other.names)

    def admits(self, name: str) -> bool:
        return dtype(name).name in self.names


def one_of(*names: str) -> Types:
    """The element types `names` (IR spellings), named by them."""
    return Types(" or ".join(names), frozenset(dtype(n).name for n in names))


def _where(label: str, pred: Any) -> Types:
    return Types(label, frozenset(n for n, d in DTYPES.items() if pred(d)))


FLOAT = _where("a float type", lambda d: d.is_float)
INT = _where("an integer type", lambda d: d.is_int)
BOOL = one_of("bool")
NUMBER = FLOAT | INT
ANY = _where("any type", lambda d: True)
#: the 8-bit integer types of ONNX's integer and QLinear ops
INT8 = one_of("int8", "uint8")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of an attribute the node must carry
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Operand:
    """One declared input or output of an op: its name, arity, element types, rank and
    the operand whose element type it shares (see the module docstring)."""

    name: str
    arity: Arity = "fixed"
    types: Types = ANY
    rank: Rank = None
    like: str | None = None

    def rank_problem(self, r: int) -> str | None:
        """Why rank `r` is not this operand's, or None."""
        if self.rank is None:
            return None
        lo, hi = (self.rank, self.rank) if isinstance(self.rank, int) else self.rank
        if r >= lo and (hi is None or r <= hi):
            return None
        want = f"{lo}" if lo == hi else f"{lo} or more" if hi is None else f"{lo} to {hi}"
        return f"rank {r}, expected rank {want}"


def operand(name: str, types: Types = ANY, *, rank: Rank = None,
            like: str | None = None) -> Operand:
    return Operand(name, "fixed", types, rank, like)


def opt_operand(name: str, types: Types = ANY, *, rank: Rank = None,
                like: str | None = None) -> Operand:
    return Operand(name, "optional", types, rank, like)


def var_operand(name: str, types: Types = ANY, *, rank: Rank = None,
                like: str | None = None) -> Operand:
    return Operand(name, "variadic", types, rank, like)


result, opt_result, var_result = operand, opt_operand, var_operand


@dataclass(frozen=True)
class Attr:
    """One declared attribute (see the module docstring)."""

    name: str
    type: Any
    default: Any = REQUIRED
    help: str = ""
    values: tuple[Any, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def problem(self, value: object) -> str | None:
        """Why `value` is not a legal value of this attribute, or None."""
        if not _is(value, self.type):
            return f"expected {_type_name(self.type)}, got {type(value).__name__} {value!r}"
        if self.values and value not in self.values:
            return f"{value!r} is not one of {', '.join(repr(v) for v in self.values)}"
        return None


def attr(name: str, type_: object, default: object = REQUIRED, help: str = "", *,
         values: tuple[object, ...] = ()) -> Attr:
    return Attr(name, type_, default, help, tuple(values))


def _is(value: object, t: object) -> bool:
    """Whether `value` (as JSON gives it) has type `t` (see the module docstring)."""
    if t is Any:
        return True
    if t is None or t is type(None):
        return value is None
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in typing.get_args(t))
    if origin is list:
        (item,) = typing.get_args(t)
        return isinstance(value, list) and all(_is(v, item) for v in value)
    if t is bool:
        return isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, t)


def _type_name(t: object) -> str:
    if t is Any:
        return "any value"
    if t is None or t is type(None):
        return "null"
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(t))
    if typing.get_origin(t) is list:
        return f"a list of {_type_name(typing.get_args(t)[0])}"
    return getattr(t, "__name__", str(t))


def arity_range(decls: tuple[Operand, ...]) -> tuple[int, int | None]:
    """The fewest and the most ids `decls` take (None: no most)."""
    lo = sum(1 for d in decls if d.arity == "fixed")
    if any(d.arity == "variadic" for d in decls):
        return lo, None
    return lo, lo + sum(1 for d in decls if d.arity == "optional")


def count_problem(decls: tuple[Operand, ...], ids: list[str], what: str) -> str | None:
    """Why `ids` (a node's inputs or outputs) do not fit `decls`, or None."""
    lo, hi = arity_range(decls)
    if lo <= len(ids) and (hi is None or len(ids) <= hi):
        return None
    names = ", ".join(d.name + {"fixed": "", "optional": "?", "variadic": "*"}[d.arity]
                      for d in decls)  # fmt: skip
    want = f"{lo}" if hi == lo else f"{lo} or more" if hi is None else f"{lo} to {hi}"
    return f"takes {want} {what} ({names}), got {len(ids)}"


def bind(decls: tuple[Operand, ...], ids: list[str]) -> list[tuple[Operand, str]]:
    """Each id of `ids` (a node's inputs or outputs, counted by `count_problem`) with the
    declaration it fills: fixed and optional ones in order, a variadic one takes the
    rest; an empty id (a left-out optional) is skipped."""
    out: list[tuple[Operand, str]] = []
    k = 0
    for j, d in enumerate(decls):
        after = sum(1 for e in decls[j + 1:] if e.arity == "fixed")
        take = len(ids) - k - after if d.arity == "variadic" else 1
        for tid in ids[k:k + take]:
            if tid:
                out.append((d, tid))
        k += take
    return out


def type_problem(bound: list[tuple[Operand, str]], dtype_of: dict[str, tuple[str, ...]],
                 rank_of: dict[str, int]) -> tuple[int, str] | None:
    """The first (index into `bound`, reason) whose tensor's element type or rank breaks
    its declaration, or None. `bound` is `bind` of the inputs then the outputs; `like`
    refers to the first tensor of the operand or result it names. A tensor may stand for
    more than one element type (`dtype_of`: its stored type first; an imported quantized
    constant also stands for the float type its integers encode): one that fits is enough,
    and two tensors are alike when they share one."""
    first: dict[str, str] = {}
    for d, tid in bound:
        first.setdefault(d.name, tid)
    canon = {t: {dtype(x).name for x in dts} for t, dts in dtype_of.items()}
    for k, (d, tid) in enumerate(bound):
        dt = dtype_of[tid][0]
        if not any(d.types.admits(x) for x in dtype_of[tid]):
            return k, f"element type {dt}, expected {d.types.label}"
        why = d.rank_problem(rank_of[tid])
        if why is not None:
            return k, why
        ref = first.get(d.like) if d.like else None
        if ref is not None and not canon[ref] & canon[tid]:
            return k, f"element type {dt}, expected {d.like}'s ({dtype_of[ref][0]})"
    return None


def attr_problem(decls: dict[str, Attr], attributes: dict[str, object]) -> tuple[str, str] | None:
    """The first (attribute name, reason) `attributes` break, or None: a required one
    missing, one of the wrong type or value, one the op does not declare."""
    for name, d in decls.items():
        if name not in attributes:
            if d.required:
                return name, "required attribute is missing"
            continue
        why = d.problem(attributes[name])
        if why is not None:
            return name, why
    for name in attributes:
        if name not in decls:
            known = ", ".join(decls) or "none"
            return name, f"unknown attribute (this op declares: {known})"
    return None


def attrs_class(op_name: str, decls: tuple[Attr, ...]) -> type:
    """The frozen dataclass of `decls`, every field keyword-only; a list default is copied
    per instance."""
    fields: list[tuple[str, Any, Any]] = []
    for d in decls:
        if d.required:
            fields.append((d.name, d.type, dataclasses.field()))
        elif isinstance(d.default, list):
            fields.append((d.name, d.type,
                           dataclasses.field(default_factory=lambda v=d.default: list(v))))
        else:
            fields.append((d.name, d.type, dataclasses.field(default=d.default)))
    return dataclasses.make_dataclass(f"{op_name}Attrs", fields, frozen=True, kw_only=True)
