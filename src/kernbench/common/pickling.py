"""Pickling a slots dataclass as a call of its constructor.

A `@dataclass(slots=True)` object pickles through the generic `__getstate__` /
`__setstate__` that dataclasses adds, which looks the class's fields up again for every
object it restores. A compile-ahead child sends every lowered CMDQ entry to the simulating
process this way (`host.compile_ahead`), where unpickling is on the simulation's critical
path; `constructor_reduce` pickles an object as its class called with its fields in
order instead, which restores it through the generated `__init__`, the same object.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

_FIELDS: dict[type, tuple[str, ...]] = {}


def constructor_reduce(obj: object) -> tuple[type, tuple[Any, ...]]:
    """`obj.__reduce__()` for a dataclass whose fields are all `__init__` arguments."""
    cls = obj.__class__
    names = _FIELDS.get(cls)
    if names is None:
        fs = fields(cls)
        if not all(f.init for f in fs):
            raise TypeError(f"{cls.__name__}: a field outside __init__ would not be pickled")
        names = _FIELDS[cls] = tuple(f.name for f in fs)
    return cls, tuple([getattr(obj, n) for n in names])
