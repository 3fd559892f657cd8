"""The one dtype table: every element type kernbench knows, interned (in the spirit of
tinygrad's dtype.py): name, storage bits (not bytes), the numpy / ml_dtypes array type,
float or integer, signedness, the value range, and the IR's short spelling.

Accepted spellings (`dtype(x)`): numpy names (float32, float16, bfloat16, int8, ...), the
IR's names (fp32, fp16, bf16, fp64, fp8), the short forms f32 / f16 / f8 / i8 / i32 / u8,
"bool", "int4" / "uint4" / "int2" / "uint2", numpy dtypes, ml_dtypes scalar types and
DType itself.

int4 / uint4 (and int2 / uint2) are *storage* dtypes: in memory int4 is packed two per
byte, low nibble first (quant.pack_int4); as arrays they live in int8 / uint8 containers.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class DType:
    """One element type. `np` is the numpy dtype of its array form (the container for
    sub-byte integers); `lo` / `hi` its value range (finite floats)."""

    name: str
    bits: int
    np: np.dtype
    is_float: bool
    signed: bool
    lo: float
    hi: float
    short: str  # the IR's spelling (fp32, bf16, int8, ...)

    @property
    def is_int(self) -> bool:
        return not self.is_float and self.name != "bool"


def _int(name: str, bits: int, signed: bool, container: npt.DTypeLike = None) -> DType:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return DType(name, bits, np.dtype(container or name), False, signed, lo, hi, name)


def _float(name: str, short: str, np_type: npt.DTypeLike) -> DType:
    fi = ml_dtypes.finfo(np_type) if np_type in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn) \
        else np.finfo(np_type)
    return DType(name, np.dtype(np_type).itemsize * 8, np.dtype(np_type), True, True, float(fi.min),
                 float(fi.max), short)


DTYPES: dict[str, DType] = {d.name: d for d in (
    _float("float64", "fp64", np.float64), _float("float32", "fp32", np.float32),
    _float("float16", "fp16", np.float16), _float("bfloat16", "bf16", ml_dtypes.bfloat16),
    _float("float8_e4m3fn", "fp8", ml_dtypes.float8_e4m3fn),
    _int("int64", 64, True), _int("int32", 32, True), _int("int16", 16, True),
    _int("int8", 8, True), _int("int4", 4, True, np.int8), _int("int2", 2, True, np.int8),
    _int("uint64", 64, False), _int("uint32", 32, False), _int("uint16", 16, False),
    _int("uint8", 8, False), _int("uint4", 4, False, np.uint8),
    _int("uint2", 2, False, np.uint8),
    DType("bool", 8, np.dtype(np.bool_), False, False, 0, 1, "bool"),
)}

_ALIASES: dict[str, str] = {
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "f8": "float8_e4m3fn", "fp8": "float8_e4m3fn", "f8e4m3": "float8_e4m3fn",
    "fp8e4m3": "float8_e4m3fn", "float8e4nv": "float8_e4m3fn",
    "f64": "float64", "fp64": "float64",
    "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16",
    "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
    "i1": "bool", "int1": "bool", "i4": "int4", "u4": "uint4",
}  # fmt: skip

#: a dtype in any accepted spelling: a DType, its name or alias, a numpy dtype or type
DTypeSpec = DType | npt.DTypeLike

PACKED = ("int4", "uint4", "int2", "uint2")


def dtype(x: DTypeSpec) -> DType:
    """The interned DType of any accepted spelling (ValueError if unknown)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        key = x.lower()
        d = DTYPES.get(_ALIASES.get(key, key))
        if d is None:
            raise ValueError(f"unknown dtype {x!r}")
        return d
    name = getattr(x, "name", None)
    if name is None:
        name = np.dtype(x).name
    return dtype(name)


def canon(x: DTypeSpec) -> str:
    """Canonical dtype name ("float32", "bfloat16", "int4", ...)."""
    return dtype(x).name


def np_dtype(x: DTypeSpec) -> np.dtype:
    """numpy dtype of the array form (int4 → int8 container, uint4 → uint8)."""
    return dtype(x).np


def short_name(x: DTypeSpec) -> str:
    """The IR's spelling of a dtype (float32 → fp32, bfloat16 → bf16, int8 → int8)."""
    return dtype(x).short


def bits(x: DTypeSpec) -> int:
    """Storage bits of one element (int4 → 4, bool → 8)."""
    return dtype(x).bits


def nbytes_of(shape: tuple[int, ...] | list[int], x: DTypeSpec) -> int:
    """Bytes a contiguous tensor occupies in memory (int4 packed, rounded up)."""
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    return (n * bits(x) + 7) // 8


def is_float(x: DTypeSpec) -> bool:
    return dtype(x).is_float


def is_int(x: DTypeSpec) -> bool:
    return dtype(x).is_int


def dtype_for_bits(nbits: int, integer: bool = True) -> str:
    """The element type of `nbits`-wide hardware data: 32 → int32 (float32 when not
    `integer`), 16 → float16, 8 → int8, 4 → int4, 2 → int2 (both packed)."""
    if nbits == 32:
        return "int32" if integer else "float32"
    if nbits == 16:
        return "float16"
    if nbits == 8:
        return "int8"
    if nbits == 4:
        return "int4"
    if nbits == 2:
        return "int2"
    raise ValueError(f"no element type for {nbits}-bit data")
