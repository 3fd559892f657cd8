"""The opcode registry: opcode string → opcode class, in registration order.

`register_opcode` (a class decorator) checks that a class carries every fact an opcode
needs and adds it; listeners (the program model in `kernbench.cmdq.schema`)
rebuild when the set changes. `registered(cls)` registers for the length of a ``with``
block, for tests and experiments that must leave the ISA as they found it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from kernbench.cmdq.opcodes.base import ENGINES, NO_DATA, QBITS_ALLOWED, TIMINGS, Opcode

MODEL_BY_OPCODE: dict[str, type[Opcode]] = {}
"""Every registered opcode class by its opcode string (live: registration updates it)."""

_listeners: list[Callable[[], None]] = []


def opcode_of(cls: type[Opcode]) -> str:
    """The opcode string of a class: the default of its ``opcode`` Literal field."""
    default = cls.model_fields["opcode"].default
    if not isinstance(default, str) or get_origin(cls.model_fields["opcode"].annotation) \
            is not Literal:
        raise TypeError(f"{cls.__name__}: 'opcode' must be a Literal with its value as default")
    return default


def missing_facts(cls: type[Opcode]) -> list[str]:
    """The facts a would-be opcode class lacks (empty: complete)."""
    missing = []
    if cls.engine not in ENGINES:
        missing.append(f"engine {cls.engine!r} is not one of {ENGINES}")
    if cls.since not in ("1.0", "1.1"):
        missing.append(f"since {cls.since!r} is not a 1.x version")
    if cls.timing not in TIMINGS:
        missing.append(f"timing {cls.timing!r} is not one of {TIMINGS}")
    if cls.timing == "math" and not cls.cost_op and "cost_ops" not in _overrides(cls):
        missing.append("a math opcode needs cost_op (its pe_math cost-table entry)")
    if cls.timing == "math" and not cls.math_op:
        missing.append("a math opcode needs math_op (the data pass's op)")
    if cls.timing == "control" and cls.control is None:
        missing.append("a control opcode needs control (barrier, nop or end)")
    if cls.timing != "control" and "command" not in _overrides(cls):
        missing.append("a PE-command opcode needs command() (its lowering)")
    if not (callable(cls.data) or cls.data == NO_DATA):
        missing.append("data must be a method data(env) or NO_DATA")
    return missing


def _overrides(cls: type[Opcode]) -> set[str]:
    return {name for name in ("command", "cost_ops")
            if getattr(cls, name) is not getattr(Opcode, name)}


def register_opcode(cls: type[Opcode]) -> type[Opcode]:
    """Class decorator: add ``cls`` to the ISA. Raises TypeError when a fact is missing or
    the opcode string is taken."""
    opcode = opcode_of(cls)
    missing = missing_facts(cls)
    if missing:
        raise TypeError(f"{cls.__name__} ({opcode}): " + "; ".join(missing))
    if opcode in MODEL_BY_OPCODE and MODEL_BY_OPCODE[opcode] is not cls:
        raise TypeError(f"{cls.__name__}: opcode {opcode} is already {MODEL_BY_OPCODE[opcode]}")
    MODEL_BY_OPCODE[opcode] = cls
    _changed()
    return cls


def unregister_opcode(cls: type[Opcode]) -> None:
    """Remove ``cls`` from the ISA (no-op when it is not registered)."""
    opcode = opcode_of(cls)
    if MODEL_BY_OPCODE.get(opcode) is cls:
        del MODEL_BY_OPCODE[opcode]
        _changed()


@contextmanager
def registered(*classes: type[Opcode]) -> Iterator[None]:
    """Register ``classes`` for the body of a ``with`` block, then remove them."""
    for cls in classes:
        register_opcode(cls)
    try:
        yield
    finally:
        for cls in reversed(classes):
            unregister_opcode(cls)


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every registration change."""
    _listeners.append(listener)


def _changed() -> None:
    for listener in _listeners:
        listener()


def opcodes() -> tuple[str, ...]:
    """Registered opcode strings, in registration order."""
    return tuple(MODEL_BY_OPCODE)


# ------------------------------------------------------------------ field kinds


def _is_qbits(annotation: object) -> bool:
    origin = get_origin(annotation)
    if origin is Literal:
        return tuple(get_args(annotation)) == QBITS_ALLOWED
    if origin is Annotated:
        return _is_qbits(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return any(_is_qbits(a) for a in get_args(annotation))
    return False


@functools.cache
def qbits_fields(cls: type[Opcode]) -> tuple[str, ...]:
    """Fields of ``cls`` whose value is a bit width (annotated `QBits`)."""
    return tuple(n for n, f in cls.model_fields.items() if _is_qbits(f.annotation))
