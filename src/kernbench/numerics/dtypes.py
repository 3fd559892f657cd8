"""dtype names shared by the data pass and the tl front end.

Accepted spellings: numpy names (float32, float16, bfloat16, int8, ...), the short forms
f32 / fp32 / f16 / fp16 / bf16 / f8 / fp8 / float8_e4m3fn / i8 / i32 / u8, "bool", and
"int4" / "uint4". numpy dtypes and ml_dtypes scalar types are accepted as well.

int4 / uint4 are *storage* dtypes: in memory they are packed two per byte, low nibble
first (qmath.pack_int4); as arrays they live in int8 / uint8 containers (qmath convention).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

_ALIASES: dict[str, str] = {
    "f32": "float32", "fp32": "float32", "float": "float32", "float32": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f8": "float8_e4m3fn", "fp8": "float8_e4m3fn", "f8e4m3": "float8_e4m3fn",
    "fp8e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn", "float8e4nv": "float8_e4m3fn",
    "f64": "float64", "fp64": "float64", "float64": "float64",
    "i8": "int8", "int8": "int8", "u8": "uint8", "uint8": "uint8",
    "i16": "int16", "int16": "int16", "u16": "uint16", "uint16": "uint16",
    "i32": "int32", "int32": "int32", "u32": "uint32", "uint32": "uint32",
    "i64": "int64", "int64": "int64", "u64": "uint64", "uint64": "uint64",
    "bool": "bool", "i1": "bool", "int1": "bool",
    "int4": "int4", "i4": "int4", "uint4": "uint4", "u4": "uint4",
}  # fmt: skip

PACKED = ("int4", "uint4")


def canon(dtype: Any) -> str:
    """Canonical dtype name ("float32", "bfloat16", "int4", ...)."""
    if isinstance(dtype, str):
        try:
            return _ALIASES[dtype.lower()]
        except KeyError:
            raise ValueError(f"unknown dtype {dtype!r}") from None
    name = getattr(dtype, "name", None)
    if name is None:
        name = np.dtype(dtype).name
    return canon(name)


def np_dtype(dtype: Any) -> np.dtype:
    """numpy dtype of the array form (int4 → int8 container, uint4 → uint8)."""
    c = canon(dtype)
    if c == "int4":
        return np.dtype(np.int8)
    if c == "uint4":
        return np.dtype(np.uint8)
    if c in ("bfloat16", "float8_e4m3fn"):
        return np.dtype(getattr(ml_dtypes, c))
    return np.dtype(c)


def bits(dtype: Any) -> int:
    """Storage bits of one element (int4 → 4, bool → 8)."""
    c = canon(dtype)
    if c in PACKED:
        return 4
    return np_dtype(c).itemsize * 8


def nbytes_of(shape: tuple[int, ...] | list[int], dtype: Any) -> int:
    """Bytes a contiguous tensor occupies in memory (int4 packed, rounded up)."""
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    return (n * bits(dtype) + 7) // 8


def is_float(dtype: Any) -> bool:
    return np_dtype(dtype).kind == "f" or canon(dtype) in ("bfloat16", "float8_e4m3fn")


def is_int(dtype: Any) -> bool:
    return canon(dtype) in PACKED or np_dtype(dtype).kind in "iu"


def dtype_for_bits(bits: int, integer: bool = True) -> str:
    """The element type of `bits`-wide hardware data: 32 → int32 (float32 when not
    `integer`), 16 → float16, 8 → int8, 4 → int4 (packed)."""
    if bits == 32:
        return "int32" if integer else "float32"
    if bits == 16:
        return "float16"
    if bits == 8:
        return "int8"
    if bits == 4:
        return "int4"
    raise ValueError(f"no element type for {bits}-bit data")
