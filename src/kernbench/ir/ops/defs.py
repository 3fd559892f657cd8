"""What an IR op declares about a node, in the manner of xDSL's IRDL (`operand_def`,
`attr_def`): its operands and results (a name and an arity each) and its attributes (a
name, a Python type, the allowed values, required or a default, a help line).

* `operand(name)` / `opt_operand(name)` / `var_operand(name)`: one input that is always
  there, one that may be left out (only at the end of the list, or as an empty id), any
  number of them. `result` / `var_result` declare the outputs the same way.
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

Arity = Literal["fixed", "optional", "variadic"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of an attribute the node must carry
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Operand:
    """One declared input or output of an op: its name and arity."""

    name: str
    arity: Arity = "fixed"


def operand(name: str) -> Operand:
    return Operand(name)


def opt_operand(name: str) -> Operand:
    return Operand(name, "optional")


def var_operand(name: str) -> Operand:
    return Operand(name, "variadic")


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
