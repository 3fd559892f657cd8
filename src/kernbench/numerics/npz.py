"""A deterministic .npz writer: the same arrays give the same bytes (fixed zip
timestamps, members in the order given, no compression, no pickle)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

import numpy as np

__all__ = ["write_npz"]


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` (member name → array) to `path`, members in the dict's order
    (callers sort for determinism). Arrays must have a numpy-native dtype (np.load reads
    them without pickle)."""
    with zipfile.ZipFile(Path(path), "w", compression=zipfile.ZIP_STORED) as zf:
        for k, a in arrays.items():
            # Fixed timestamp so that the file is byte-identical run to run.
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w") as f:
                _write_npy(f, np.asarray(a))


def _write_npy(f: IO[bytes], a: np.ndarray) -> None:
    """`np.lib.format.write_array(f, a, allow_pickle=False)`, byte for byte. A C-ordered
    array of a plain numpy dtype goes to `f` as one view of its memory: write_array
    copies a zip member's data through `tobytes` in 16 MiB blocks, a copy per byte of
    hundreds of MB of weights. Anything else (Fortran order, a strided view, a record or
    user-defined dtype) is left to write_array."""
    d = a.dtype
    if a.flags.c_contiguous and d.names is None and d.subdtype is None \
            and type(d)._legacy and not d.hasobject and d.kind in "biufc":
        header = np.lib.format.header_data_from_array_1_0(a)
        np.lib.format.write_array_header_1_0(f, header)
        if a.size:
            f.write(memoryview(a.reshape(-1).view(np.uint8)))
        return
    np.lib.format.write_array(f, a, allow_pickle=False)
