"""tl dtypes (triton.language spelling) and `constexpr`.

A `dtype` wraps a canonical name of kernbench.numerics.dtypes; `tl.float32 == "float32"`
holds. Pointer tensors report a `PtrType` whose `element_ty` is the pointee's dtype.
"""

from __future__ import annotations

from typing import Any

from kernbench.numerics.dtypes import bits, canon, np_dtype


class dtype:  # noqa: N801 - triton.language spelling
    """A tl dtype: a canonical element type name."""

    def __init__(self, name: str) -> None:
        self.name = canon(name)

    def __repr__(self) -> str:
        return f"tl.{_TL_NAME.get(self.name, self.name)}"

    def __eq__(self, other: object) -> bool:
        try:
            return canon(other if not isinstance(other, dtype) else other.name) == self.name
        except (ValueError, TypeError):
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def element_ty(self) -> dtype:
        return self

    def is_floating(self) -> bool:
        return np_dtype(self.name).kind in "fV"

    def is_int(self) -> bool:
        return np_dtype(self.name).kind in "iu"

    @property
    def primitive_bitwidth(self) -> int:
        return bits(self.name)


_TL_NAME = {"float8_e4m3fn": "float8e4nv", "bool": "int1"}
float32 = dtype("float32")
float16 = dtype("float16")
bfloat16 = dtype("bfloat16")
float8e4nv = dtype("float8_e4m3fn")
float64 = dtype("float64")
int1 = dtype("bool")
int8 = dtype("int8")
int16 = dtype("int16")
int32 = dtype("int32")
int64 = dtype("int64")
uint8 = dtype("uint8")
uint32 = dtype("uint32")
fp32, fp16, bf16 = float32, float16, bfloat16


def dtype_name(d: Any) -> str:
    """The canonical name of a tl dtype or anything numerics.dtypes.canon accepts."""
    return d.name if isinstance(d, dtype) else canon(d)


class constexpr:  # noqa: N801
    """Marker annotation (`BLOCK: tl.constexpr`); values pass through unchanged."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"



class PtrType(dtype):
    """The dtype of a pointer tensor: `element_ty` is what it points to."""

    def __init__(self, elem: str) -> None:
        self.name = "pointer"
        self._elem = dtype(elem)

    @property
    def element_ty(self) -> dtype:
        return self._elem

    def __repr__(self) -> str:
        return f"pointer<{self._elem!r}>"
