"""Whole-layer kernels by name: the one table the IR interpreter and the data pass share.

`run_layer(name, args, params)` calls `LAYER_KERNELS[name](*args, **params)` and returns
the list of outputs. `args` are the layer's inputs in order (arrays, None for an absent
optional input); `params` are plain values (numbers, strings, lists, dicts of those and
numpy arrays). Which params a kernel takes is its function's signature (the modules of
this package document them). The IR side (kernbench.ir.interpreter) turns an IR node
into (name, params); the data pass stores them in its op log and calls run_layer.

Numerics of narrow floats (one rule for both executions): float16, bfloat16 and fp8
inputs are widened to float32 before the kernel runs, every kernel computes in fp32 (in
float64 inside numerics.wide.wide_floats, which widens every float input; the GEMM
kernels widen a float32 input themselves, so a weight is quantized from the array the
graph holds) and
the caller rounds each output once, to the output tensor's dtype (the IR interpreter's
`stored`, the data pass's store). Rounding inside a kernel (numpy's float16 ufuncs round
after every step) would make the two executions differ by an ulp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench.numerics import activations as act
from kernbench.numerics import attention as attn
from kernbench.numerics import elementwise as ew
from kernbench.numerics import layers_extra as lx
from kernbench.numerics import linalg, norms, pool, shape, shape_extra
from kernbench.numerics import quant as qmath
from kernbench.numerics.errors import KernelError
from kernbench.numerics.moe import moe_route
from kernbench.numerics.reduce import reduce
from kernbench.numerics.rope import rope
from kernbench.numerics.softmax import softmax
from kernbench.numerics.wide import is_wide

__all__ = ["LAYER_KERNELS", "run_layer", "widen_float"]

LayerFn = Callable[..., list[np.ndarray]]


def _one(f: Callable[..., np.ndarray]) -> LayerFn:
    def g(*args: np.ndarray, **params: object) -> list[np.ndarray]:
        return [f(*args, **params)]

    g.__doc__ = f.__doc__
    return g


def _softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return softmax(x, axis).astype(x.dtype)


def _identity(x: np.ndarray) -> np.ndarray:
    return np.array(x, copy=True)


def _quantize(x, scale, zero_point=None, *, bits: int, signed: bool, axis=None,  # noqa: ANN001
              block_size: int = 0) -> np.ndarray:
    zp = zero_point if zero_point is not None else np.zeros((), np.int8)
    return qmath.quantize(x.astype(np.float32), scale.astype(np.float32), zp, bits, signed,
                          axis, block_size)


def _dequantize(x, scale, zero_point=None, *, axis=None, block_size: int = 0):  # noqa: ANN001
    zp = zero_point if zero_point is not None else np.zeros((), np.int8)
    if x.dtype == np.int32:
        return qmath.dequantize_int32(x, scale, zp)
    return qmath.dequantize(x, scale.astype(np.float32), zp, axis, block_size)


def _qdq(x, scale, zero_point=None, *, bits: int, signed: bool, axis=None,  # noqa: ANN001
         block_size: int = 0) -> np.ndarray:
    zp = zero_point if zero_point is not None else np.zeros((), np.int8)
    q = qmath.quantize(x.astype(np.float32), scale, zp, bits, signed, axis, block_size)
    return qmath.dequantize(q, scale, zp, axis, block_size)


LAYER_KERNELS: dict[str, LayerFn] = {
    "gemm": _one(linalg.gemm),
    "qkv_proj": linalg.qkv_proj,
    "matmul": _one(linalg.matmul),
    "matmul_integer": _one(linalg.matmul_integer),
    "qlinear_matmul": _one(linalg.qlinear_matmul),
    "qlinear_conv": _one(linalg.qlinear_conv),
    "conv_integer": _one(linalg.conv_integer),
    "conv": _one(linalg.conv),
    "attention": _one(attn.attention),
    "identity": _one(_identity),
    "elementwise": _one(ew.elementwise),
    "reduce": _one(reduce),
    "softmax": _one(_softmax),
    "layernorm": lambda *a, **p: list(norms.layernorm(*a, **p)),
    "rmsnorm": _one(norms.rmsnorm),
    "gelu": _one(act.gelu),
    "silu": _one(act.silu),
    "rope": _one(rope),
    "embedding": _one(shape.embedding),
    "gather": _one(shape.gather),
    "gather_elements": _one(shape.gather_elements),
    "gather_nd": _one(shape.gather_nd),
    "reshape": _one(shape.reshape),
    "transpose": _one(shape.transpose),
    "split": shape.split,
    "slice": _one(shape.slice_),
    "concat": _one(shape.concat),
    "expand": _one(shape.expand),
    "kv_update": _one(shape.kv_update),
    "quantize": _one(_quantize),
    "dequantize": _one(_dequantize),
    "qdq": _one(_qdq),
    "dynamic_quantize": lambda x: list(qmath.dynamic_quantize_linear(x)),
    "pool": _one(pool.pool),
    "cumsum": _one(pool.cumsum),
    "tile": _one(shape_extra.tile),
    "pad": _one(shape_extra.pad),
    "topk": shape_extra.topk,
    "moe_route": moe_route,
    "einsum": _one(shape_extra.einsum),
    "scatter_elements": _one(lx.scatter_elements),
    "scatter_nd": _one(lx.scatter_nd),
    "group_norm": _one(lx.group_norm),
    "log_softmax": _one(lx.log_softmax),
    "hardmax": _one(lx.hardmax),
    "trilu": _one(lx.trilu),
    "one_hot": _one(lx.one_hot),
    "depth_to_space": _one(lx.depth_to_space),
    "space_to_depth": _one(lx.space_to_depth),
}


def run_layer(name: str, args: list[np.ndarray | None], params: dict[str, Any]
              ) -> list[np.ndarray]:  # fmt: skip
    """The outputs of layer kernel `name` on `args` with `params`."""
    fn = LAYER_KERNELS.get(name)
    if fn is None:
        raise KernelError(f"no layer kernel {name!r}")
    if name in _SELF_WIDENING and is_wide():
        return fn(*[widen_float(a) if not _is_f32(a) else a for a in args], **params)
    return fn(*[widen_float(a) for a in args], **params)


#: kernels that compute on `work(...)` of every float input themselves: a float32 input
#: reaches them as it is (a GEMM weight is quantized from it, not from a widened copy)
_SELF_WIDENING = frozenset({"gemm", "qkv_proj"})


def _is_f32(a: object) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.float32


def widen_float(x: object) -> object:
    """A float16 / bfloat16 / fp8 array as float32 (exact), any float array as float64
    inside numerics.wide.wide_floats; anything else unchanged."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fV":
        return x
    if is_wide() and x.dtype != np.float64:
        return x.astype(np.float64)
    return x.astype(np.float32) if x.dtype.itemsize < 4 else x
