"""The keys a pydantic model accepts at a location of its input: the candidates a
"did you mean" suggestion for an unknown key is drawn from.

`known_keys(Model, loc)` follows `loc` (a pydantic error location: field names, list
indices, dict keys, union branch tags) down the model's field annotations and returns
the field names (aliases where set) of the model reached at `loc[:-1]`; `[]` when that
place is not a model (a dict of free keys, a scalar).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel


def _models_in(tp: Any) -> list[Any]:
    """The types a value annotated `tp` may be: unions and Annotated unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(tp) for t in _models_in(a)]
    return [tp]


def _step(tp: Any, part: Any) -> Any | None:
    """The annotation one level below `tp` along `part`, or None when `part` is no step."""
    for t in _models_in(tp):
        origin = typing.get_origin(t)
        if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
            for name, f in t.model_fields.items():
                if part in (name, f.alias):
                    return f.annotation
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int):
            return typing.get_args(t)[0]
        elif origin is dict:
            return typing.get_args(t)[1]
    return None


def known_keys(model: type[BaseModel], loc: tuple[Any, ...] | list[Any]) -> list[str]:
    """Field names (aliases where set) accepted where `loc[-1]` was refused."""
    tp: Any = model
    for part in list(loc)[:-1]:
        nxt = _step(tp, part)
        if nxt is not None:
            tp = nxt
        # else: a union branch tag ('list[str]', 'function-after[...]'): stay put
    keys: list[str] = []
    for t in _models_in(tp):
        if isinstance(t, type) and issubclass(t, BaseModel):
            keys += [f.alias or n for n, f in t.model_fields.items()]
    return sorted(set(keys))
