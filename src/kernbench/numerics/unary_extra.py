"""More elementwise ops of the IR's ELEMENTWISE layer (ONNX semantics), with their attributes.

`EXTRA_FNS[op](*xs, **attrs)` computes op on its inputs; `attrs` are the ONNX node's
attributes the importer kept (alpha, beta, gamma, lambd, fmod, detect_negative, ...).
Float results keep the input's float dtype (scalars are cast to it so fp16 stays fp16).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["EXTRA_FNS"]


def _k(x: np.ndarray, v: float) -> np.ndarray:
    # a python float would promote fp16 / bf16 arithmetic: pin the scalar to x's dtype
    return np.asarray(v, dtype=x.dtype)


def _same(f: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def g(x: np.ndarray) -> np.ndarray:
        return np.asarray(f(x)).astype(x.dtype)

    return g


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x.astype(np.float64), 0.0).astype(x.dtype)


def _softsign(x: np.ndarray) -> np.ndarray:
    return (x / (_k(x, 1.0) + np.abs(x))).astype(x.dtype)


def _hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    return np.clip(x * _k(x, alpha) + _k(x, beta), 0, 1).astype(x.dtype)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return (x * _hard_sigmoid(x, 1.0 / 6.0, 0.5)).astype(x.dtype)


def _mish(x: np.ndarray) -> np.ndarray:
    return (x * np.tanh(_softplus(x))).astype(x.dtype)


def _selu(x: np.ndarray, alpha: float = 1.67326319217681884765625,
          gamma: float = 1.05070102214813232421875) -> np.ndarray:  # fmt: skip
    a, g = _k(x, alpha), _k(x, gamma)
    return np.where(x > 0, g * x, g * (a * np.exp(x) - a)).astype(x.dtype)


def _elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x >= 0, x, _k(x, alpha) * (np.exp(x) - 1)).astype(x.dtype)


def _celu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # bf16 / fp16 math in fp32
    a = _k(xf, alpha)
    return (np.maximum(xf, 0) + np.minimum(0, a * (np.exp(xf / a) - 1))).astype(x.dtype)


def _leaky_relu(x: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    return np.where(x >= 0, x, x * _k(x, alpha)).astype(x.dtype)


def _thresholded_relu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x > _k(x, alpha), x, 0).astype(x.dtype)


def _prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x < 0, x * slope.astype(x.dtype), x).astype(x.dtype)


def _shrink(x: np.ndarray, bias: float = 0.0, lambd: float = 0.5) -> np.ndarray:
    b = np.asarray(bias).astype(x.dtype)
    return np.where(x < -lambd, x + b, np.where(x > lambd, x - b, 0)).astype(x.dtype)


def _isinf(x: np.ndarray, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


def _mod(a: np.ndarray, b: np.ndarray, fmod: int = 0) -> np.ndarray:
    # fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %)
    return (np.fmod(a, b) if fmod else np.mod(a, b)).astype(a.dtype)


def _xor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.logical_xor(a, b)


def _variadic(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def g(*xs: np.ndarray) -> np.ndarray:
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return np.asarray(out).astype(xs[0].dtype)

    return g


def _mean(*xs: np.ndarray) -> np.ndarray:
    return (_variadic(np.add)(*xs) / _k(xs[0], len(xs))).astype(xs[0].dtype)


def _bitshift(a: np.ndarray, b: np.ndarray, direction: str = "LEFT") -> np.ndarray:
    f = np.left_shift if direction == "LEFT" else np.right_shift
    return f(a, b).astype(a.dtype)


EXTRA_FNS: dict[str, Callable[..., np.ndarray]] = {
    "round": _same(np.round),  # numpy rounds half to even, as ONNX Round
    "sign": _same(np.sign),
    "tan": _same(np.tan),
    "asin": _same(np.arcsin),
    "acos": _same(np.arccos),
    "atan": _same(np.arctan),
    "sinh": _same(np.sinh),
    "cosh": _same(np.cosh),
    "asinh": _same(np.arcsinh),
    "acosh": _same(np.arccosh),
    "atanh": _same(np.arctanh),
    "softplus": _softplus,
    "softsign": _softsign,
    "hard_sigmoid": _hard_sigmoid,
    "hard_swish": _hard_swish,
    "mish": _mish,
    "selu": _selu,
    "elu": _elu,
    "celu": _celu,
    "leaky_relu": _leaky_relu,
    "thresholded_relu": _thresholded_relu,
    "prelu": _prelu,
    "shrink": _shrink,
    "isinf": _isinf,
    "mod": _mod,
    "xor": _xor,
    "sum": _variadic(np.add),
    "mean": _mean,
    "bitshift": _bitshift,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.bitwise_not,
}
