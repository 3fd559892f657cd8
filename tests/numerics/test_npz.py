"""`write_npz`: every member is the .npy numpy itself writes for the array, byte for byte
(the zero-copy path for C-ordered plain arrays, numpy's writer for the rest), and the
file is the same bytes each time."""

from __future__ import annotations

import io
import zipfile

import ml_dtypes
import numpy as np

from kernbench.numerics.npz import write_npz

ARRAYS = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "scalar": np.array(3.5),
    "empty": np.zeros((0, 5), np.int8),
    "big_endian": np.arange(10, dtype=">i4"),
    "complex": np.ones((2, 3), np.complex64),
    "bool": np.array([True, False]),
    "fortran": np.arange(6, dtype=np.uint16).reshape(2, 3).T,
    "strided": np.arange(20)[::2],
    "bf16": np.arange(5).astype(ml_dtypes.bfloat16),
    "record": np.zeros(3, dtype=[("a", "<i4")]),
    "f16": np.linspace(-1, 1, 63).astype(np.float16).reshape(7, 1, 9),
}


def _npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, a, allow_pickle=False)
    return b.getvalue()


def test_members_are_numpys_own_npy_bytes(tmp_path):
    p = tmp_path / "a.npz"
    write_npz(p, ARRAYS)
    with zipfile.ZipFile(p) as z:
        assert z.namelist() == [k + ".npy" for k in ARRAYS]
        for k, a in ARRAYS.items():
            assert z.read(k + ".npy") == _npy(a), k
    with np.load(p, allow_pickle=False) as z:
        for k, a in ARRAYS.items():
            if k != "bf16":  # numpy reads a bfloat16 member back as raw void
                np.testing.assert_array_equal(z[k], a)


def test_same_arrays_same_bytes(tmp_path):
    write_npz(tmp_path / "a.npz", ARRAYS)
    write_npz(tmp_path / "b.npz", dict(ARRAYS))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
