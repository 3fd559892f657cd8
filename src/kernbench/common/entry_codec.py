"""Control-FSM entries as JSON: what a compile-ahead child sends the simulating process.

The child lowers its chunks to `ProgramEntry` objects (`cmdq.hw.lowered_chunks`) and the
parent takes them as they are, so the pipe must carry those objects. It carries them as
JSON, which can only ever make data: plain JSON values, and a few tagged objects, each a
dict of one key the plain values cannot have (it starts with a NUL character), built
again from a fixed list of classes:

- a tuple, a `StageType`, a numpy scalar (its dtype and value);
- a `ProgramEntry` (its fields in order) and a `PeCommand` of `common.pe_commands` (its
  class name and its fields in order), each rebuilt by calling the class.

Floats keep their exact value (JSON writes `repr`), NaN and infinities included. Anything
else is a TypeError naming its type: nothing is sent that would come back different.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import numpy as np

from kernbench.common import pe_commands
from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import StageType

_TUPLE, _STAGE, _NUMPY, _ENTRY, _COMMAND = "\0t", "\0s", "\0n", "\0e", "\0c"
_PLAIN = (str, int, float, bool, type(None))
#: the command classes a message may name (every PeCommand of common.pe_commands)
COMMANDS: dict[str, type[PeCommand]] = {
    c.__name__: c for c in vars(pe_commands).values()
    if isinstance(c, type) and issubclass(c, PeCommand)}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """The fields of dataclass `cls` in order; all must be __init__ arguments."""
    names = _FIELDS.get(cls)
    if names is None:
        fs = fields(cls)
        if not all(f.init for f in fs):
            raise TypeError(f"{cls.__name__}: a field outside __init__ cannot be sent")
        names = _FIELDS[cls] = tuple(f.name for f in fs)
    return names


def _tagged(v: object) -> Any:  # noqa: ANN401 - any value a chunk holds
    """`v` with everything JSON does not keep as it is tagged (module docstring)."""
    t = v.__class__
    if t in _PLAIN:
        return v
    if t is list:
        return [_tagged(x) for x in v]
    if t is dict:
        if not all(k.__class__ is str and not k.startswith("\0") for k in v):
            raise TypeError("cannot send a dict whose keys are not plain strings")
        return {k: _tagged(x) for k, x in v.items()}
    if t is tuple:
        return {_TUPLE: [_tagged(x) for x in v]}
    if t is StageType:
        return {_STAGE: int(v)}
    if t is ProgramEntry:
        return {_ENTRY: [_tagged(getattr(v, n)) for n in _names(t)]}
    if COMMANDS.get(t.__name__) is t:
        return {_COMMAND: [t.__name__, [_tagged(getattr(v, n)) for n in _names(t)]]}
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return {_NUMPY: [v.dtype.str, v.item()]}
    raise TypeError(f"cannot send a {t.__name__}")


def _untagged(d: dict[str, Any]) -> Any:  # noqa: ANN401 - any value a chunk holds
    if len(d) != 1:
        return d
    (key, v), = d.items()
    if key == _TUPLE:
        return tuple(v)
    if key == _ENTRY:
        return ProgramEntry(*v)
    if key == _COMMAND:
        cls = COMMANDS.get(v[0])
        if cls is None:
            raise ValueError(f"no command class {v[0]!r}")
        return cls(*v[1])
    if key == _STAGE:
        return StageType(v)
    if key == _NUMPY:
        return np.dtype(v[0]).type(v[1])
    return d


def dumps(obj: object) -> bytes:
    """`obj` as compact JSON bytes (module docstring); TypeError for what cannot be sent."""
    return json.dumps(_tagged(obj), separators=(",", ":")).encode()


def loads(data: bytes) -> Any:  # noqa: ANN401 - any value a chunk holds
    """What `dumps` wrote, built again."""
    return json.loads(data, object_hook=_untagged)


__all__ = ["COMMANDS", "dumps", "loads"]
