"""Elementwise ops of the IR (ONNX semantics) and the one cast rule.

`elementwise(*xs, op=...)` is the IR's ELEMENTWISE / ADD / MUL layer: unary ops from
UNARY_FNS, binary ops from BINARY_FNS (a float left operand makes the right one its
dtype for add/sub/mul/div), `where`, variadic `max` / `min`, `clip` (x, lo, hi), `cast`
(`to`), and the ops of numerics.unary_extra (with their attributes).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernbench.numerics.activations import erf, relu, sigmoid
from kernbench.numerics.dtypes import PACKED, bits, canon, np_dtype
from kernbench.numerics.errors import KernelError
from kernbench.numerics.quant import qrange
from kernbench.numerics.unary_extra import EXTRA_FNS

__all__ = ["UNARY_FNS", "BINARY_FNS", "elementwise", "cast", "div", "power"]


def _f(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind == "f" else x.astype(np.float32)


UNARY_FNS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sqrt": np.sqrt,
    "reciprocal": lambda x: np.reciprocal(_f(x)),
    "neg": np.negative,
    "erf": erf,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "exp": np.exp,
    "log": np.log,
    "abs": np.abs,
    "relu": relu,
    "isnan": np.isnan,
    "not": np.logical_not,
    "cos": np.cos,
    "sin": np.sin,
    "floor": np.floor,
    "ceil": np.ceil,
}


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b; two integer operands divide truncating toward zero (C, ONNX Div)."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(a.dtype)
    return np.divide(a, b)


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b in a's dtype (x ** 2 as x·x, exactly what exporters' Pow(x, 2) means)."""
    if a.dtype.kind == "f":
        if b.size == 1 and float(b.reshape(-1)[0]) == 2.0:
            return (a * a).astype(a.dtype)
        return np.power(a, b.astype(a.dtype)).astype(a.dtype)
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": div,
    "pow": power,
    "equal": np.equal,
    "less": np.less,
    "greater": np.greater,
    "less_equal": np.less_equal,
    "greater_equal": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


def cast(x: np.ndarray, to: str) -> np.ndarray:
    """x as dtype `to`: float → integer truncates toward zero (C / ONNX Cast); int4 /
    uint4 saturate to their range (int8 / uint8 containers). Sub-32-bit floats
    (f16, bf16, fp8) are widened to fp32 before truncating."""
    x = np.asarray(x)
    dt = np_dtype(to)
    if x.dtype.kind in "fV" and x.dtype.itemsize < 4:
        xw = x.astype(np.float32)
    else:
        xw = x
    if canon(to) in PACKED:
        lo, hi = qrange(bits(to), canon(to).startswith("int"))
        return np.clip(np.trunc(xw), lo, hi).astype(dt)
    if x.dtype.kind in "fV" and dt.kind in "iu":
        return np.trunc(xw).astype(dt)
    return x.astype(dt)


def elementwise(*xs: np.ndarray, op: str, to: str | None = None, **attrs: object
                ) -> np.ndarray:  # fmt: skip
    """The IR elementwise op `op` on its inputs (see the module docstring); ops of
    numerics.unary_extra take their ONNX attributes as `attrs`."""
    with np.errstate(all="ignore"):
        if op in EXTRA_FNS:
            return EXTRA_FNS[op](*xs, **attrs)
        if op in UNARY_FNS:
            return UNARY_FNS[op](xs[0])
        if op in BINARY_FNS:
            a, b = xs
            if op in ("add", "sub", "mul", "div") and a.dtype != b.dtype and a.dtype.kind == "f":
                b = b.astype(a.dtype)
            return BINARY_FNS[op](a, b)
        if op == "where":
            return np.where(xs[0], xs[1], xs[2])
        if op in ("max", "min"):
            f = np.maximum if op == "max" else np.minimum
            out = xs[0]
            for x in xs[1:]:
                out = f(out, x)
            return out
        if op == "clip":  # ONNX Clip(x, lo, hi); the importer supplies both bounds
            return np.minimum(np.maximum(xs[0], xs[1]), xs[2]).astype(xs[0].dtype)
        if op == "cast":
            if to is None:
                raise KernelError("cast needs 'to'")
            return cast(xs[0], to)
    raise KernelError(f"unknown elementwise op {op!r}")
