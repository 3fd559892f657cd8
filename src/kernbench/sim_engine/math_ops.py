"""The data pass's elementwise, shape and reduction math ops (registry: math_registry).

Numerics: sub-32-bit float inputs (f16, bf16, fp8) are widened to float32 before the op
and the result is rounded to the output dtype at the end (the SIMD unit computes in
fp32). Transcendental ops and casts are kernbench.numerics' (the IR interpreter uses the
same functions); the fused ops (softmax, norms, rope, quantization, whole layers) are in
math_fused, imported at the end of this module so that importing it registers them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench.numerics import activations
from kernbench.numerics.elementwise import cast
from kernbench.sim_engine.math_registry import MATH_OPS, MathFn, fl, math_op, widen

__all__ = ["MATH_OPS", "math_op", "widen"]
_fl = fl


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


math_op("sigmoid")(_unary(activations.sigmoid))
math_op("erf")(_unary(activations.erf))
math_op("silu")(_unary(activations.silu))


@math_op("gelu")
def _gelu(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    return activations.gelu(_fl(ins[0]), p.get("approximate", "none"))


@math_op("cast", "copy")
def _cast(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = np.asarray(ins[0])
    to = p.get("dtype")
    return x.copy() if to is None else cast(x, to)  # float → int: C conversion, toward zero


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



# the fused ops register themselves on import (after this module's names exist)
from kernbench.sim_engine import math_chain, math_fused, math_gather, math_window  # noqa: E402, F401
