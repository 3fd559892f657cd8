"""`json.dump(obj, f, indent=1, sort_keys=True)`, byte for byte, several times faster.

With an indent, the standard library encodes in pure Python, a generator per container and
a `yield` per token: writing a real-size program's cmdq.json or a trace was a large part of
a compile. `dump_indented` writes the same text by appending the pieces to a list (strings
through the C string encoder, numbers through their own `repr`, as `json` does) and
streams it to the file in blocks, so a large document is never held whole. A dict's keys
are sorted and encoded once per key set and depth (`_layout`: a program's thousands of
entries share a few key sets), ints and strs are written inline. Anything but
exact dicts with str keys, lists, tuples, str, int, float, bool and None (a subclass, a
numpy scalar, a non-str key, a nesting deeper than `MAX_DEPTH`: a possible cycle) makes it
start over with `json.dump`, which then gives the standard library's text or its error.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import IO, cast

MAX_DEPTH = 200
_FLUSH = 1 << 16  # pieces held before a write
_LAYOUTS = 4096  # key layouts kept per document
_INF = float("inf")
_frepr = float.__repr__
_irepr = int.__repr__


class _Unsupported(Exception):
    """A value this writer leaves to `json.dump`."""


def _float(x: float) -> str:
    if x != x:
        return "NaN"
    if x == _INF:
        return "Infinity"
    if x == -_INF:
        return "-Infinity"
    return _frepr(x)


class _Writer:
    __slots__ = ("f", "layouts", "out")

    def __init__(self, f: IO[str]) -> None:
        self.f = f
        self.out: list[str] = []
        # (level, keys in the dict's order) → `_layout`
        self.layouts: dict[tuple, tuple[tuple[str, str], ...]] = {}

    def flush(self) -> None:
        self.f.write("".join(self.out))
        self.out.clear()

    def value(self, v: object, level: int) -> None:
        out = self.out
        t = v.__class__
        if t is str:
            out.append(encode_basestring_ascii(cast(str, v)))
        elif v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif t is int:
            out.append(_irepr(v))
        elif t is float:
            out.append(_float(cast(float, v)))
        elif t is dict:
            self.mapping(cast(dict, v), level)
        elif t is list or t is tuple:
            self.sequence(cast("list | tuple", v), level)
        else:
            raise _Unsupported

    def mapping(self, d: dict, level: int) -> None:
        out = self.out
        if not d:
            out.append("{}")
            return
        layout = self.layouts.get((level, *d))
        if layout is None:
            layout = self._layout(d, level)
        value = self.value
        for k, head in layout:
            out.append(head)
            v = d[k]
            t = v.__class__
            if t is int:
                out.append(_irepr(v))
            elif t is str:
                out.append(encode_basestring_ascii(v))
            else:
                value(v, level + 1)
        out.append("\n" + " " * level + "}")
        if len(out) > _FLUSH:
            self.flush()

    def _layout(self, d: dict, level: int) -> tuple[tuple[str, str], ...]:
        """(key, the text before its value) of `d`'s keys in sorted order, kept for the
        next dict with the same keys in the same order at the same level (a program's
        entries share a few key sets)."""
        if level >= MAX_DEPTH:
            raise _Unsupported
        for k in d:
            if k.__class__ is not str:
                raise _Unsupported
        nl = "\n" + " " * (level + 1)
        keys = sorted(d)
        layout = tuple((k, ("{" if i == 0 else ",") + nl + encode_basestring_ascii(k) + ": ")
                       for i, k in enumerate(keys))
        if len(self.layouts) < _LAYOUTS:
            self.layouts[(level, *d)] = layout
        return layout

    def sequence(self, seq: list | tuple, level: int) -> None:
        out = self.out
        if not seq:
            out.append("[]")
            return
        if level >= MAX_DEPTH:
            raise _Unsupported
        nl = "\n" + " " * (level + 1)
        sep = "," + nl
        out.append("[" + nl)
        first = True
        value = self.value
        for v in seq:
            if first:
                first = False
            else:
                out.append(sep)
            if v.__class__ is int:
                out.append(_irepr(v))
            else:
                value(v, level + 1)
        out.append("\n" + " " * level + "]")
        if len(out) > _FLUSH:
            self.flush()


def dump_indented(obj: object, f: IO[str]) -> None:
    """Write `obj` to the text file `f` (opened for writing, at its start, seekable) exactly
    as `json.dump(obj, f, indent=1, sort_keys=True)` would."""
    w = _Writer(f)
    try:
        w.value(obj, 0)
        w.flush()
    except _Unsupported:
        f.seek(0)
        f.truncate()
        json.dump(obj, f, indent=1, sort_keys=True)
