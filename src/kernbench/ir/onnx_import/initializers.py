"""Which IR weights are a model file's initializers (or a slice of one), unchanged, and
how to read them back.

A bundle holds a copy of its source model; an IR weight that is the very array the import
read from one of the model's initializers, or a fusion cut from one (`remember_slice`:
the QKV projection's three weights), need not be written a second time into
`ir_weights.npz` (`compiler.pipeline.write_bundle`). The import remembers each
initializer array it made (`remember`) with the key of the file it read (`file_key`):
only read-only arrays, which no pass can change in place, and only while they live (a
weak reference). `initializer_of` answers for an array and the file as it is now; a
file rewritten since it was read has another key, and nothing of it is taken.
`loader.read_initializers` reads them back from a model copy (`sliced`).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Source", "file_key", "initializer_of", "remember", "remember_slice", "sliced"]

#: where a weight's values are in the model: an initializer's name, or
#: {"initializer": name, "axis": a, "start": i, "stop": j} for the elements i:j along a
Source = str | dict[str, Any]

#: id of an array the import made from the model → (weak reference, file key, source)
_READ: dict[int, tuple[weakref.ref, tuple, Source]] = {}


def file_key(path: str | Path) -> tuple:
    """The file as it is now: its resolved path, device, inode, size and modification and
    change times (a rewritten or replaced file gets another key)."""
    path = Path(path)
    st = path.stat()
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def _frozen(a: np.ndarray) -> bool:
    """Can nothing write `a`'s elements? (read-only, and so is every array it views)"""
    x: object = a
    while isinstance(x, np.ndarray):
        if x.flags.writeable:
            return False
        x = x.base
    return True


def _keep(a: np.ndarray, key: tuple, source: Source) -> None:
    i = id(a)
    _READ[i] = (weakref.ref(a, lambda _r, i=i: _forget(i)), key, source)


def remember(a: np.ndarray, key: tuple, name: str) -> None:
    """`a` is initializer `name` of the file `key`, as `to_array` made it. An array that
    could be written is not remembered (a pass could change it in place)."""
    if _frozen(a):
        _keep(a, key, name)


def remember_slice(part: np.ndarray, whole: np.ndarray, axis: int, start: int,
                   stop: int) -> None:
    """`part` holds the elements `start:stop` along `axis` of `whole` (a fusion's cut of
    a weight): remembered when `whole` is a remembered initializer and neither can be
    written."""
    e = _READ.get(id(whole))
    if e is None or e[0]() is not whole or not isinstance(e[2], str) or not _frozen(part):
        return
    _keep(part, e[1], {"initializer": e[2], "axis": int(axis), "start": int(start),
                       "stop": int(stop)})


def _forget(i: int) -> None:
    e = _READ.get(i)
    if e is not None and e[0]() is None:
        del _READ[i]


def initializer_of(a: object, key: tuple) -> Source | None:
    """Where in the model file `key` the array `a` is (`Source`), or None."""
    e = _READ.get(id(a))
    if e is None or e[0]() is not a or e[1] != key:
        return None
    return e[2]


def sliced(whole: np.ndarray, source: Source) -> np.ndarray:
    """The array `source` names, of its initializer's array `whole` (C-ordered, as the
    fusions make it). A slice outside the array is a ValueError."""
    if isinstance(source, str):
        return whole
    axis, start, stop = source["axis"], source["start"], source["stop"]
    if not 0 <= axis < whole.ndim or not 0 <= start <= stop <= whole.shape[axis]:
        raise ValueError(f"slice {start}:{stop} along axis {axis} is outside its "
                         f"{list(whole.shape)} array")
    return np.ascontiguousarray(whole[(slice(None),) * axis + (slice(start, stop),)])
