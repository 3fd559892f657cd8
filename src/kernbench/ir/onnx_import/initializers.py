"""Which IR weights are a model file's initializers, unchanged, and reading them back.

A bundle holds a copy of its source model; an IR weight that is the very array the import
read from one of the model's initializers need not be written a second time into
`ir_weights.npz` (`compiler.pipeline.write_bundle`). The import remembers each
initializer array it made (`remember`) with the key of the file it read (`file_key`):
only read-only arrays, which no pass can change in place, and only while they live (a
weak reference). `initializer_of` answers for an array and the file as it is now; a
file rewritten since it was read has another key, and nothing of it is taken.
`loader.read_initializers` reads named initializers of a model copy back.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np

__all__ = ["file_key", "initializer_of", "remember"]

#: id of an initializer array the import made → (weak reference, file key, name)
_READ: dict[int, tuple[weakref.ref, tuple, str]] = {}


def file_key(path: str | Path) -> tuple:
    """The file as it is now: its resolved path, device, inode, size and modification and
    change times (a rewritten or replaced file gets another key)."""
    path = Path(path)
    st = path.stat()
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def remember(a: np.ndarray, key: tuple, name: str) -> None:
    """`a` is initializer `name` of the file `key`, as `to_array` made it. A writeable
    array is not remembered (a pass could change it in place)."""
    if a.flags.writeable:
        return
    i = id(a)
    _READ[i] = (weakref.ref(a, lambda _r, i=i: _forget(i)), key, name)


def _forget(i: int) -> None:
    e = _READ.get(i)
    if e is not None and e[0]() is None:
        del _READ[i]


def initializer_of(a: object, key: tuple) -> str | None:
    """The name of the initializer of the file `key` that `a` is, or None."""
    e = _READ.get(id(a))
    if e is None or e[0]() is not a or e[1] != key:
        return None
    return e[2]
