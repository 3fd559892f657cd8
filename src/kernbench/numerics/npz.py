"""A deterministic .npz writer: the same arrays give the same bytes (fixed zip
timestamps, members in the order given, no compression, no pickle)."""

from __future__ import annotations

import zipfile
from pathlib import Path

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
                np.lib.format.write_array(f, np.asarray(a), allow_pickle=False)
