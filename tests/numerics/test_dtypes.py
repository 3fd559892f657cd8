"""The one dtype table: every spelling resolves to one interned entry whose facts agree
with numpy / ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernbench.numerics.dtypes import DTYPES, canon, dtype, nbytes_of, np_dtype, short_name

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu


def test_spellings_are_interned():
    assert dtype("fp32") is dtype("float32") is dtype(np.float32) is dtype(np.dtype("f4"))
    assert dtype("bf16") is dtype(ml_dtypes.bfloat16)
    assert canon("F16") == "float16" and short_name("float16") == "fp16"
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype("float7")


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_facts_agree_with_numpy(name):
    d = DTYPES[name]
    if d.is_float:
        fi = ml_dtypes.finfo(d.np) if d.np.kind == "V" or name.startswith("float8") \
            else np.finfo(d.np)
        assert (d.lo, d.hi, d.bits) == (float(fi.min), float(fi.max), d.np.itemsize * 8)
    elif name == "bool":
        assert (d.lo, d.hi, d.bits) == (0, 1, 8)
    else:
        assert d.hi - d.lo == 2 ** d.bits - 1 and (d.lo < 0) == d.signed
        if d.bits >= 8:
            ii = np.iinfo(d.np)
            assert (d.lo, d.hi) == (ii.min, ii.max)
        assert np_dtype(name).itemsize * 8 >= d.bits


def test_nbytes_packs_sub_byte_types():
    assert nbytes_of((3,), "int4") == 2 and nbytes_of((2, 3), "bf16") == 12
    assert nbytes_of((), "fp32") == 4
