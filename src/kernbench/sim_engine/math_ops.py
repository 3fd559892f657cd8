"""The math-op registry of the data pass: `@math_op("name")` functions on numpy arrays.

A function gets the list of input arrays (already read from memory or taken from the
record's immediates) and the record's params, and returns the output array; the
executor casts it to the record's `dtype` and checks its shape against `shape_out`.

Numerics: sub-32-bit float inputs (f16, bf16, fp8) are widened to float32 before the op
and the result is rounded to the output dtype at the end (the SIMD unit computes in
fp32). Softmax, layernorm, rmsnorm, gelu, silu, rope and erf reuse the IR reference
interpreter's functions, so results are bit-identical to it; quantize / dequantize /
requantize are kernbench.numerics.quant.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from kernbench.numerics.dtypes import np_dtype

MathFn = Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]
MATH_OPS: dict[str, MathFn] = {}


def math_op(*names: str) -> Callable[[MathFn], MathFn]:
    def deco(f: MathFn) -> MathFn:
        for n in names:
            MATH_OPS[n] = f
        return f

    return deco


def _interp() -> Any:
    from kernbench.ir import interpreter

    return interpreter


def widen(x: np.ndarray) -> np.ndarray:
    """f16 / bf16 / fp8 → float32; everything else unchanged."""
    x = np.asarray(x)
    if x.dtype.itemsize < 4 and (x.dtype.kind == "f" or x.dtype.kind == "V"):
        return x.astype(np.float32)
    return x


def _fl(x: np.ndarray) -> np.ndarray:
    x = widen(x)
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def _axis(p: dict[str, Any]) -> Any:
    ax = p.get("axis")
    return tuple(ax) if isinstance(ax, list) else ax


# ------------------------------------------------------------------ elementwise
def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> MathFn:
    def f(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
        a, b = (widen(x) for x in ins)
        return fn(a, b)

    return f


math_op("add")(_binary(np.add))
math_op("sub")(_binary(np.subtract))
math_op("mul")(_binary(np.multiply))
math_op("maximum")(_binary(np.maximum))
math_op("minimum")(_binary(np.minimum))
math_op("less")(_binary(np.less))
math_op("less_equal")(_binary(np.less_equal))
math_op("greater")(_binary(np.greater))
math_op("greater_equal")(_binary(np.greater_equal))
math_op("equal")(_binary(np.equal))
math_op("not_equal")(_binary(np.not_equal))
math_op("and")(_binary(lambda a, b: a & b))
math_op("or")(_binary(lambda a, b: a | b))
math_op("xor")(_binary(lambda a, b: a ^ b))
math_op("mod")(_binary(np.fmod))  # C semantics (Triton / CUDA %)


@math_op("div")
def _div(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    a, b = (widen(x) for x in ins)
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        if p.get("int_div"):  # C division: truncate toward zero
            return np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(
                np.result_type(a, b))
        return a.astype(np.float32) / b.astype(np.float32)
    return a / b


@math_op("max", "min")
def _max_min(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    # two inputs: elementwise; one input: reduction over `axis`
    if len(ins) == 2:
        return (np.maximum if p["op"] == "max" else np.minimum)(widen(ins[0]), widen(ins[1]))
    return (_reduce_max if p["op"] == "max" else _reduce_min)(ins, p)


@math_op("where")
def _where(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    c, a, b = ins
    return np.where(np.asarray(c).astype(bool), widen(a), widen(b))


def _unary(fn: Callable[[np.ndarray], np.ndarray], floating: bool = True) -> MathFn:
    def f(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
        x = _fl(ins[0]) if floating else widen(ins[0])
        return fn(x)

    return f


math_op("exp")(_unary(np.exp))
math_op("exp2")(_unary(np.exp2))
math_op("log")(_unary(np.log))
math_op("log2")(_unary(np.log2))
math_op("sqrt")(_unary(np.sqrt))
math_op("rsqrt")(_unary(lambda x: (np.float32(1.0) / np.sqrt(x)).astype(x.dtype)))
math_op("tanh")(_unary(np.tanh))
math_op("sin")(_unary(np.sin))
math_op("cos")(_unary(np.cos))
math_op("floor")(_unary(np.floor))
math_op("ceil")(_unary(np.ceil))
math_op("neg")(_unary(np.negative, floating=False))
math_op("abs")(_unary(np.abs, floating=False))
math_op("not")(_unary(np.logical_not, floating=False))
math_op("reciprocal")(_unary(lambda x: (np.float32(1.0) / x).astype(x.dtype)))


@math_op("sigmoid")
def _sigmoid(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return _interp().UNARY_FNS["sigmoid"](_fl(ins[0]))


@math_op("erf")
def _erf(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return _interp()._erf(_fl(ins[0]))


@math_op("gelu")
def _gelu(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return _interp().gelu(_fl(ins[0]), p.get("approximate", "none"))


@math_op("silu")
def _silu(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return _interp()._k_silu(None, None, [_fl(ins[0])])[0]


@math_op("cast", "copy")
def _cast(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = np.asarray(ins[0])
    to = p.get("dtype")
    if to is None:
        return x.copy()
    dt = np_dtype(to)
    if str(to) in ("int4", "uint4"):
        from kernbench.numerics import quant as qmath

        lo, hi = qmath.qrange(4, to == "int4")
        return np.clip(np.trunc(widen(x)), lo, hi).astype(dt)
    if (x.dtype.kind == "f" or x.dtype.kind == "V") and dt.kind in "iu":
        return np.trunc(widen(x)).astype(dt)  # C conversion: toward zero
    return x.astype(dt)


@math_op("transpose")
def _transpose(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = ins[0]
    perm = p.get("perm")
    if perm is None:
        perm = list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2] if x.ndim >= 2 else None
    return np.ascontiguousarray(np.transpose(x, perm))


@math_op("reshape")
def _reshape(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return ins[0].reshape(tuple(p["shape_out"]))


@math_op("broadcast")
def _broadcast(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.broadcast_to(ins[0], tuple(p["shape_out"])).copy()


@math_op("const")
def _const(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.broadcast_to(np.asarray(p["value"]), tuple(p["shape_out"])).copy()


# ------------------------------------------------------------------ reductions
@math_op("sum")
def _sum(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = widen(ins[0])
    if x.dtype.kind == "b":
        x = x.astype(np.int32)
    return np.sum(x, axis=_axis(p), keepdims=bool(p.get("keepdims", False)))


@math_op("reduce_max")
def _reduce_max(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.max(widen(ins[0]), axis=_axis(p), keepdims=bool(p.get("keepdims", False)))


@math_op("reduce_min")
def _reduce_min(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.min(widen(ins[0]), axis=_axis(p), keepdims=bool(p.get("keepdims", False)))


@math_op("argmax")
def _argmax(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.argmax(widen(ins[0]), axis=_axis(p), keepdims=bool(p.get("keepdims", False)))


@math_op("argmin")
def _argmin(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return np.argmin(widen(ins[0]), axis=_axis(p), keepdims=bool(p.get("keepdims", False)))


# ------------------------------------------------------------------ fused layers
@math_op("softmax")
def _softmax(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """softmax over `axis` (default -1); optional `scale` multiplies x first; optional
    `causal_offset` masks column j > row i + offset with -inf (interpreter ATTENTION);
    fully masked rows give 0."""
    x = _fl(ins[0]).astype(np.float32)
    axis = p.get("axis", -1)
    if axis is None:
        axis = -1
    if p.get("scale") is not None:
        x = x * np.float32(p["scale"])
    dead = None
    if p.get("causal_offset") is not None and x.ndim >= 2:
        sq, t = x.shape[-2], x.shape[-1]
        allowed = np.arange(t)[None, :] <= (np.arange(sq)[:, None] + int(p["causal_offset"]))
        bias = np.where(allowed, np.float32(0), np.float32(-np.inf))
        x = x + bias
        dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        y = _interp().softmax(x, axis)
    if dead is not None:
        y = np.where(dead, np.float32(0), y)
        y = np.nan_to_num(y, nan=0.0)
    return y


def _node(**attrs: Any) -> Any:
    return SimpleNamespace(attributes=attrs, id="data-pass", op_type="")


@math_op("layernorm")
def _layernorm(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Normalise over the axes from `axis` (default -1) on; inputs x[, gamma[, beta]]."""
    x = ins[0]
    axis = p.get("axis", -1)
    axis = (axis if axis is not None else -1) % x.ndim
    gamma = ins[1] if len(ins) > 1 else np.ones(x.shape[axis:], np.float32)
    beta = ins[2] if len(ins) > 2 else None
    return _interp()._k_layernorm(None, _node(axis=axis, eps=float(p.get("eps", 1e-5))),
                                  [widen(x), widen(gamma), None if beta is None else
                                   widen(beta)])[0]


@math_op("rmsnorm")
def _rmsnorm(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = ins[0]
    axis = p.get("axis", -1)
    axis = (axis if axis is not None else -1) % x.ndim
    gamma = widen(ins[1]) if len(ins) > 1 else None
    return _interp()._k_rmsnorm(None, _node(axis=axis, eps=float(p.get("eps", 1e-6))),
                                [widen(x), gamma])[0]


@math_op("rope")
def _rope(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Half-style rotary embedding: inputs x, cos, sin (cos / sin broadcast to x)."""
    return _interp()._k_rope(None, _node(), [widen(i) for i in ins[:3]])[0]


# ------------------------------------------------------------------ quantization
@math_op("quantize")
def _quantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from kernbench.numerics import quant as qmath

    scale = ins[1] if len(ins) > 1 else p["scale"]
    return qmath.quantize(_fl(ins[0]), np.asarray(scale, np.float32), p.get("zero_point", 0),
                          int(p.get("bits", 8)), bool(p.get("signed", True)),
                          p.get("quant_axis"), int(p.get("block_size", 0)))


@math_op("dequantize")
def _dequantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from kernbench.numerics import quant as qmath

    scale = ins[1] if len(ins) > 1 else p["scale"]
    return qmath.dequantize(ins[0], np.asarray(scale, np.float32), p.get("zero_point", 0),
                            p.get("quant_axis"), int(p.get("block_size", 0)))


@math_op("requantize")
def _requantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from kernbench.numerics import quant as qmath

    mult = ins[1] if len(ins) > 1 else p.get("multiplier", p.get("scale"))
    return qmath.requantize(ins[0], np.asarray(mult, np.float32), p.get("zero_point", 0),
                            int(p.get("bits", 8)), bool(p.get("signed", True)))


@math_op("dequant_scale")
def _dequant_scale(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """int32 accumulator × scale (scalar or per-output-channel vector) → float32."""
    scale = ins[1] if len(ins) > 1 else p["scale"]
    return (np.asarray(ins[0]).astype(np.float32) * np.asarray(scale, np.float32)).astype(
        np.float32)
