"""The tl ops: program ids, constructors, math, reductions, shapes, `dot`, and the no-op
hints (multiple_of, assume, ...). Each builds on tensor.py's element-wise core: const
operands are computed eagerly, loaded / pending ones issue a command to the PE."""

from __future__ import annotations

import builtins as _b
from typing import Any

import numpy as np

from kernbench.numerics.dtypes import np_dtype
from kernbench.triton_emu.context import KernelError, kernel_line, prog
from kernbench.triton_emu.dtypes import dtype_name, float32
from kernbench.triton_emu.tensor import (
    Tensor,
    all_const,
    binop,
    compute,
    const,
    operand,
    reshape,
    result_dtype,
    store_const,
    unop,
    wrap,
)


def program_id(axis: int = 0) -> int:
    return prog().pid[int(axis)]


def num_programs(axis: int = 0) -> int:
    return prog().grid[int(axis)]


def cdiv(a: Any, b: Any) -> Any:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (a + b - 1) // b
    return -(-int(a) // int(b))


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def arange(start: int, end: int) -> Tensor:
    return Tensor("const", (int(end) - int(start),), "int32",
                  np.arange(int(start), int(end), dtype=np.int64))


def zeros(shape: Any, dtype: Any = float32) -> Tensor:
    return full(shape, 0, dtype)


def full(shape: Any, value: Any, dtype: Any = float32) -> Tensor:
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dn = dtype_name(dtype)
    return Tensor("const", shape, dn, store_const(np.full(shape, value), dn))


def zeros_like(x: Tensor) -> Tensor:
    return zeros(x.shape, x.dtype_name)



def _unary_api(op: str) -> Any:
    def f(x: Any, **_: Any) -> Tensor:
        return unop(op, x)

    f.__name__ = op
    return f


exp = _unary_api("exp")
exp2 = _unary_api("exp2")
log = _unary_api("log")
log2 = _unary_api("log2")
sqrt = _unary_api("sqrt")
sqrt_rn = sqrt
rsqrt = _unary_api("rsqrt")
sigmoid = _unary_api("sigmoid")
tanh = _unary_api("tanh")
erf = _unary_api("erf")
sin = _unary_api("sin")
cos = _unary_api("cos")
floor = _unary_api("floor")
ceil = _unary_api("ceil")
abs = _unary_api("abs")  # noqa: A001


def maximum(a: Any, b: Any, **_: Any) -> Tensor:
    return binop("maximum", a, b)


def minimum(a: Any, b: Any, **_: Any) -> Tensor:
    return binop("minimum", a, b)


def fdiv(a: Any, b: Any, **_: Any) -> Tensor:
    return binop("div", a, b)


def div_rn(a: Any, b: Any) -> Tensor:
    return binop("div", a, b)


def where(cond: Any, x: Any, y: Any) -> Tensor:
    cond, x, y = wrap(cond), wrap(x), wrap(y)
    out = result_dtype("where", [x, y])
    if all_const(cond, x, y):
        c = cond.data if isinstance(cond, Tensor) else cond
        xv = x.data if isinstance(x, Tensor) else x
        yv = y.data if isinstance(y, Tensor) else y
        r = np.where(np.asarray(c).astype(bool), xv, yv)
        return Tensor("const", r.shape, out, store_const(r, out))
    if not isinstance(cond, Tensor):
        cond = const(np.bool_(cond))
    return compute("where", [cond, x, y], out)


def _reduce(op: str, x: Any, axis: Any, keep_dims: bool) -> Tensor:
    x = wrap(x)
    if not isinstance(x, Tensor):
        x = const(x)
    ax = None if axis is None else int(axis) % _b.max(x.ndim, 1)
    if ax is None:
        shape: tuple[int, ...] = tuple(1 for _ in x.shape) if keep_dims else ()
    else:
        shape = tuple((1 if i == ax else d) for i, d in enumerate(x.shape)
                      if keep_dims or i != ax)
    dn = x.dtype_name
    if op == "sum" and dn == "bool":
        dn = "int32"
    if x.kind == "const":
        fn = {"sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
              "argmax": np.argmax, "argmin": np.argmin}[op]
        r = fn(x.data, axis=ax, keepdims=keep_dims)
        if op in ("argmax", "argmin"):
            dn = "int32"
        return Tensor("const", np.shape(r), dn, store_const(np.asarray(r), dn))
    if op in ("argmax", "argmin"):
        dn = "int32"
    return compute(op, [x], dn, shape=shape, attrs={"axis": ax, "keepdims": keep_dims},
                    length=x.numel)


def sum(x: Any, axis: Any = None, keep_dims: bool = False, **_: Any) -> Tensor:  # noqa: A001
    return _reduce("sum", x, axis, keep_dims)


def max(x: Any, axis: Any = None, keep_dims: bool = False, **_: Any) -> Tensor:  # noqa: A001
    return _reduce("reduce_max", x, axis, keep_dims)


def min(x: Any, axis: Any = None, keep_dims: bool = False, **_: Any) -> Tensor:  # noqa: A001
    return _reduce("reduce_min", x, axis, keep_dims)


def argmax(x: Any, axis: Any, keep_dims: bool = False, **_: Any) -> Tensor:
    return _reduce("argmax", x, axis, keep_dims)


def argmin(x: Any, axis: Any, keep_dims: bool = False, **_: Any) -> Tensor:
    return _reduce("argmin", x, axis, keep_dims)


def softmax(x: Any, axis: int = -1, **_: Any) -> Tensor:
    x = wrap(x)
    dn = x.dtype_name if np_dtype(x.dtype_name).kind in "fV" else "float32"
    return compute("softmax", [x], dn, attrs={"axis": axis})



def expand_dims(x: Any, axis: int) -> Tensor:
    x = wrap(x)
    shape = list(x.shape)
    shape.insert(axis % (len(shape) + 1), 1)
    return reshape(x, shape)


def broadcast_to(x: Any, shape: Any) -> Tensor:
    x = wrap(x)
    shape = tuple(int(s) for s in shape)
    if x.kind in ("const", "pointer"):
        d = np.broadcast_to(x.data, shape).copy()
        return Tensor(x.kind, shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    return compute("broadcast", [x], x.dtype_name, shape=shape)


def dot(a: Any, b: Any, acc: Any = None, input_precision: Any = None, allow_tf32: Any = None,
        max_num_imprecise_acc: Any = None, out_dtype: Any = float32) -> Tensor:  # fmt: skip
    """a (M, K) @ b (K, N) [+ acc] on pe_gemm."""
    return gemm(a, b, acc, out_dtype, wait=True)[0]


def gemm(a: Any, b: Any, acc: Any, out_dtype: Any, wait: bool) -> tuple[Tensor, Any]:
    a, b = wrap(a), wrap(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise KernelError(f"{kernel_line()}: tl.dot needs (M, K) @ (K, N), got {a.shape} @ "
                          f"{b.shape}")
    integer = np_dtype(a.dtype_name).kind in "iu" and np_dtype(b.dtype_name).kind in "iu"
    if acc is not None:
        acc = wrap(acc)
        dn = acc.dtype_name
    else:
        dn = "int32" if integer else dtype_name(out_dtype)
    a, b = _materialise(a), _materialise(b)
    if acc is not None and acc.kind == "const" and not np.any(acc.data):
        acc = None
    elif acc is not None:
        acc = _materialise(acc)
    line = kernel_line()
    buf, handle = prog().request("gemm", a=operand(a), b=operand(b),
                                  acc=None if acc is None else operand(acc),
                                  shape=(a.shape[0], b.shape[1]), dtype=dn, line=line, wait=wait)
    return Tensor("pending", (a.shape[0], b.shape[1]), dn, None, buf, f"dot at {line}"), handle


def _materialise(x: Tensor) -> Tensor:
    if x.kind in ("loaded", "pending"):
        return x
    if x.kind == "pointer":
        raise KernelError(f"{kernel_line()}: a pointer is not a dot operand (tl.load it)")
    return compute("copy", [x], x.dtype_name, shape=x.shape)


# ---------------------------------------------------------------------- memory


def static_range(*args: Any) -> range:
    return _b.range(*[int(a) for a in args])


def range(*args: Any, num_stages: Any = None, loop_unroll_factor: Any = None,  # noqa: A001
          **_: Any) -> Any:
    return _b.range(*[int(a) for a in args])


def multiple_of(x: Any, values: Any) -> Any:
    return x


def max_contiguous(x: Any, values: Any) -> Any:
    return x


def max_constancy(x: Any, values: Any) -> Any:
    return x


def assume(cond: Any) -> None:
    return None


def debug_barrier() -> None:
    return None


def static_assert(cond: Any, msg: str = "") -> None:
    if not cond:
        raise KernelError(f"{kernel_line()}: static_assert failed: {msg}")


def device_assert(cond: Any, msg: str = "", mask: Any = None) -> None:
    return None


def static_print(*args: Any) -> None:
    print(*args)


def device_print(prefix: str, *args: Any) -> None:
    print(prefix, *args)
