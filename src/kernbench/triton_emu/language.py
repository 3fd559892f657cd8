"""`kernbench.tl`: the triton.language subset real kernels use (ADR-0020 D3).

Values are `Tensor`s of four kinds:
- "const": host-known data (arange, zeros, full, Python scalars and arithmetic among
  them). Index math; computed eagerly with numpy in pass 1, at no simulated cost.
- "loaded": the result of `tl.load`: real data in pass 1 (control flow may depend on
  it) that also lives in the PE's TCM.
- "pending": a compute result (pe_math / pe_gemm). It lives in TCM; its data exists only
  after pass 2, and touching it in pass 1 raises PendingValueError.
- "pointer": a block of element addresses into a device buffer (pointer + offsets).

Any op with a loaded or pending operand is issued to the simulated PE (pe_math or
pe_gemm) and returns a pending value.
"""

from __future__ import annotations

import builtins as _b
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from kernbench.errors import InputError
from kernbench.numerics.dtypes import canon, np_dtype

# ---------------------------------------------------------------------- errors


class KernelError(InputError):
    """A kernel did something invalid (out-of-bounds access, TCM overflow, bad op)."""


class PendingValueError(KernelError):
    """A compute result's data was touched in pass 1."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def kernel_line() -> str:
    """`file:line` of the innermost kernel frame (first frame outside triton_emu)."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG_DIR) and not fn.endswith(os.sep + "tl.py"):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<kernel>:?"


# ---------------------------------------------------------------------- dtypes


class dtype:  # noqa: N801 - triton.language spelling
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
        from kernbench.numerics.dtypes import bits

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


def _dn(d: Any) -> str:
    return d.name if isinstance(d, dtype) else canon(d)


class constexpr:  # noqa: N801
    """Marker annotation (`BLOCK: tl.constexpr`); values pass through unchanged."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"


# ---------------------------------------------------------------------- context

_CTX: list[Any] = [None]  # the running Program (set by the runner on every switch)


def _prog() -> Any:
    p = _CTX[0]
    if p is None:
        raise KernelError("tl.* called outside a kernel launch (use kernel[grid](...))")
    return p


# ---------------------------------------------------------------------- tensors


class Tensor:
    __slots__ = ("kind", "shape", "dtype_name", "data", "buf", "origin", "ptr_buf", "__weakref__")

    def __init__(self, kind: str, shape: tuple[int, ...], dtype_name: str, data: Any = None,
                 buf: Any = None, origin: str = "", ptr_buf: Any = None) -> None:  # fmt: skip
        p = _CTX[0]
        if p is not None:  # every tl op makes a Tensor: the op budget stops endless loops
            r = p.runner
            r.ops += 1
            if r.ops > r.max_ops:
                raise KernelError(f"{kernel_line()}: the launch exceeded its budget of "
                                  f"{r.max_ops} tl operations (an endless loop?); raise it "
                                  "with --max-ops")
        self.kind = kind
        self.shape = tuple(int(s) for s in shape)
        self.dtype_name = dtype_name
        self.data = data
        self.buf = buf
        self.origin = origin
        self.ptr_buf = ptr_buf

    # -- introspection ---------------------------------------------------
    @property
    def dtype(self) -> dtype:
        if self.kind == "pointer":
            return _PtrType(self.dtype_name)
        return dtype(self.dtype_name)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<tl.tensor {self.kind} {list(self.shape)} {self.dtype_name}>"

    def _real(self, what: str) -> np.ndarray:
        if self.kind == "pending":
            raise PendingValueError(
                f"{kernel_line()}: {what} of a value computed by {self.origin or 'an op'} in "
                f"pass 1: compute results are pending until the data pass (ADR-0020 D3); "
                f"only values returned by tl.load (and index math) can steer control flow"
            )
        return self.data

    def numpy(self) -> np.ndarray:
        return np.array(self._real("reading the data"))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._real("converting to numpy")
        return np.asarray(a, dtype=dtype)

    def item(self) -> Any:
        return self._real("reading an element").item()

    def __bool__(self) -> bool:
        return bool(self._real("the truth value"))

    def __int__(self) -> int:
        return int(self._real("int()"))

    def __float__(self) -> float:
        return float(self._real("float()"))

    def __index__(self) -> int:
        return int(self._real("using as an index"))

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise KernelError(f"{kernel_line()}: tl tensors are not iterable")

    __hash__ = object.__hash__

    # -- conversions -----------------------------------------------------
    def to(self, dtype: Any, **_: Any) -> Tensor:
        return cast(self, dtype)

    def __getitem__(self, idx: Any) -> Tensor:
        return _index(self, idx)

    @property
    def T(self) -> Tensor:  # noqa: N802
        return trans(self)

    def reshape(self, *shape: Any) -> Tensor:
        return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int)
                       else shape)

    # -- arithmetic ------------------------------------------------------
    def __add__(self, o: Any) -> Tensor:
        return _binop("add", self, o)

    def __radd__(self, o: Any) -> Tensor:
        return _binop("add", o, self)

    def __sub__(self, o: Any) -> Tensor:
        return _binop("sub", self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return _binop("sub", o, self)

    def __mul__(self, o: Any) -> Tensor:
        return _binop("mul", self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return _binop("mul", o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return _binop("div", self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return _binop("div", o, self)

    def __floordiv__(self, o: Any) -> Tensor:
        return _binop("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return _binop("floordiv", o, self)

    def __mod__(self, o: Any) -> Tensor:
        return _binop("mod", self, o)

    def __rmod__(self, o: Any) -> Tensor:
        return _binop("mod", o, self)

    def __neg__(self) -> Tensor:
        return _unop("neg", self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return _unop("abs", self)

    def __invert__(self) -> Tensor:
        return _unop("not", self)

    def __and__(self, o: Any) -> Tensor:
        return _binop("and", self, o)

    def __rand__(self, o: Any) -> Tensor:
        return _binop("and", o, self)

    def __or__(self, o: Any) -> Tensor:
        return _binop("or", self, o)

    def __ror__(self, o: Any) -> Tensor:
        return _binop("or", o, self)

    def __xor__(self, o: Any) -> Tensor:
        return _binop("xor", self, o)

    def __lt__(self, o: Any) -> Tensor:
        return _binop("less", self, o)

    def __le__(self, o: Any) -> Tensor:
        return _binop("less_equal", self, o)

    def __gt__(self, o: Any) -> Tensor:
        return _binop("greater", self, o)

    def __ge__(self, o: Any) -> Tensor:
        return _binop("greater_equal", self, o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _binop("equal", self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _binop("not_equal", self, o)


tensor = Tensor


class _PtrType(dtype):
    def __init__(self, elem: str) -> None:
        self.name = "pointer"
        self._elem = dtype(elem)

    @property
    def element_ty(self) -> dtype:
        return self._elem

    def __repr__(self) -> str:
        return f"pointer<{self._elem!r}>"


def const(data: Any, dtype_name: str | None = None) -> Tensor:
    a = np.asarray(data)
    dn = dtype_name or _default_dtype(a)
    return Tensor("const", a.shape, dn, _store_const(a, dn))


def _default_dtype(a: np.ndarray) -> str:
    if a.dtype.kind == "b":
        return "bool"
    if a.dtype.kind in "iu":
        return "int64" if a.dtype.itemsize > 4 and a.dtype.name.startswith("u") else "int32"
    if a.dtype == np.float64:
        return "float32"
    return canon(a.dtype)


def _store_const(a: np.ndarray, dn: str) -> np.ndarray:
    """Const ints are kept in int64 (index math must not overflow); floats in their dtype."""
    dt = np_dtype(dn)
    if dt.kind in "iu":
        return np.asarray(a).astype(np.int64)
    return np.asarray(a).astype(dt)


def _wrap(x: Any) -> Any:
    """Tensor stays; Python scalar stays (weak); ndarray → const."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, bool | int | float):
        return x
    if isinstance(x, np.ndarray | np.generic):
        return const(x)
    if isinstance(x, constexpr):
        return x.value
    from kernbench.triton_emu.runtime import DeviceBuffer

    if isinstance(x, DeviceBuffer):
        return x.pointer()
    raise KernelError(f"{kernel_line()}: unsupported operand {type(x).__name__}")


def _dtype_of(x: Any) -> Any:
    if isinstance(x, Tensor):
        return np_dtype(x.dtype_name)
    return x  # python scalar: weak


def _result_dtype(op: str, xs: list[Any]) -> str:
    if op in _CMP:
        return "bool"
    tens = [x for x in xs if isinstance(x, Tensor)]
    dts = [_dtype_of(x) for x in xs]
    try:
        r = np.result_type(*dts)
    except TypeError:
        r = np.result_type(*[np.float32 if isinstance(d, float) else d for d in dts])
    name = r.name
    if op == "div" and r.kind in "iub":
        return "float32"
    if name == "float64" and not any(t.dtype_name == "float64" for t in tens):
        return "float32"
    if name == "int64" and not any(t.dtype_name == "int64" for t in tens):
        return "int32"
    if name in ("int8", "int16", "uint8") and op not in ("and", "or", "xor", "where"):
        return name
    return canon(name)


_CMP = ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")
_NP_BIN = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "equal": np.equal,
    "not_equal": np.not_equal, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}  # fmt: skip


def _eager_bin(op: str, a: Any, b: Any, out: str) -> np.ndarray:
    av = a.data if isinstance(a, Tensor) else a
    bv = b.data if isinstance(b, Tensor) else b
    with np.errstate(all="ignore"):
        if op == "div":
            if np_dtype(out).kind == "f" and np.asarray(av).dtype.kind in "iub" and \
                    np.asarray(bv).dtype.kind in "iub":
                r = np.asarray(av, np.float32) / np.asarray(bv, np.float32)
            else:
                r = np.true_divide(av, bv)
        elif op == "floordiv":
            if np.asarray(av).dtype.kind in "iu" and np.asarray(bv).dtype.kind in "iu":
                r = np.trunc(np.asarray(av, np.float64) / np.asarray(bv, np.float64))
            else:
                r = np.floor_divide(av, bv)
        elif op == "mod":
            r = np.fmod(av, bv)
        else:
            r = _NP_BIN[op](av, bv)
    return _store_const(np.asarray(r), out)


def _binop(op: str, a: Any, b: Any) -> Tensor:
    a, b = _wrap(a), _wrap(b)
    if isinstance(a, Tensor) and a.kind == "pointer" or isinstance(b, Tensor) and \
            b.kind == "pointer":
        return _ptr_arith(op, a, b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return const(_NP_BIN[op](a, b) if op in _NP_BIN else a / b)
    out = _result_dtype("floordiv" if op == "floordiv" else op, [a, b])
    if _all_const(a, b) or _scalar_real(a, b):
        data = _eager_bin(op, a, b, out)
        return Tensor("const", data.shape, out, data)
    if op == "floordiv":
        return _compute("div", [a, b], out, attrs={"int_div": True})
    return _compute(op, [a, b], out)


def _scalar_real(*xs: Any) -> bool:
    """Scalar ops on real data (loaded scalars) run on the PE's scalar unit in pass 1."""
    ts = [x for x in xs if isinstance(x, Tensor)]
    return all(t.kind in ("const", "loaded") and t.data is not None and t.numel == 1
               for t in ts)


def _all_const(*xs: Any) -> bool:
    return all(not isinstance(x, Tensor) or x.kind == "const" for x in xs)


def _ptr_arith(op: str, a: Any, b: Any) -> Tensor:
    if op == "sub" and isinstance(a, Tensor) and a.kind == "pointer" and not (
            isinstance(b, Tensor) and b.kind == "pointer"):
        return _ptr_arith("add", a, _binop("mul", b, -1) if isinstance(b, Tensor) else -b)
    if op != "add":
        raise KernelError(f"{kernel_line()}: pointer arithmetic supports + and - offsets only")
    p, off = (a, b) if isinstance(a, Tensor) and a.kind == "pointer" else (b, a)
    if isinstance(off, Tensor):
        if off.kind == "pending":
            off._real("pointer arithmetic")
        if off.kind == "pointer":
            raise KernelError(f"{kernel_line()}: cannot add two pointers")
        offv = np.asarray(off.data).astype(np.int64)
    else:
        offv = np.int64(off)
    isz = np_dtype(p.dtype_name).itemsize
    addrs = p.data + offv * isz
    return Tensor("pointer", np.shape(addrs), p.dtype_name, addrs, ptr_buf=p.ptr_buf)


def _unop(op: str, x: Any) -> Tensor:
    x = _wrap(x)
    if not isinstance(x, Tensor):
        x = const(x)
    if x.kind == "const":
        with np.errstate(all="ignore"):
            fn = {"neg": np.negative, "abs": np.abs, "not": np.invert if x.data.dtype.kind
                  in "iu" else np.logical_not}.get(op)
            if fn is None:
                from kernbench.sim_engine.math_ops import MATH_OPS

                r = MATH_OPS[op]([x.data.astype(np.float32) if x.data.dtype.kind in "iu"
                                  else x.data], {"op": op})
                dn = x.dtype_name if np_dtype(x.dtype_name).kind == "f" else "float32"
            else:
                r = fn(x.data)
                dn = x.dtype_name
        return Tensor("const", np.shape(r), dn, _store_const(np.asarray(r), dn))
    dn = x.dtype_name
    if op not in ("neg", "abs", "not") and np_dtype(dn).kind not in "fV":
        dn = "float32"
    return _compute(op, [x], dn)


def _index(x: Tensor, idx: Any) -> Tensor:
    if not isinstance(idx, tuple):
        idx = (idx,)
    if x.kind in ("const", "pointer") or (x.kind == "loaded" and x.buf is None):
        d = x.data[idx]
        return Tensor(x.kind, np.shape(d), x.dtype_name, d, ptr_buf=x.ptr_buf)
    views = all(it is None or it is Ellipsis or (isinstance(it, slice) and it == slice(None))
                for it in idx)
    if x.kind == "loaded" and x.data is not None and not views:
        d = np.asarray(x.data[idx])  # element access on real (loaded) data
        return Tensor("const", d.shape, x.dtype_name, _store_const(d, x.dtype_name))
    # TCM values: only adding unit axes (x[:, None]) is a free view
    new: list[int] = []
    src = list(x.shape)
    for it in idx:
        if it is None:
            new.append(1)
        elif it is Ellipsis:
            k = len(src) - _b.sum(1 for j in idx if j is not None and j is not Ellipsis)
            new += src[:k]
            src = src[k:]
        elif isinstance(it, slice) and it == slice(None):
            new.append(src.pop(0))
        else:
            raise KernelError(f"{kernel_line()}: indexing a tl tensor supports only [:, None]"
                              f"-style broadcasting (got {it!r})")
    new += src
    data = None
    if x.kind == "loaded":
        data = x.data[idx]
    return Tensor(x.kind, tuple(new), x.dtype_name, data, x.buf, x.origin)


# ---------------------------------------------------------------------- issuing ops


def _operand(x: Any, dn: str | None = None) -> dict[str, Any]:
    if isinstance(x, Tensor) and x.kind in ("loaded", "pending"):
        return {"buf": x.buf, "shape": x.shape, "dtype": x.dtype_name}
    if isinstance(x, Tensor):
        return {"buf": None, "shape": x.shape, "dtype": x.dtype_name,
                "imm": np.asarray(x.data).astype(np_dtype(x.dtype_name))}
    return {"buf": None, "shape": (), "dtype": None, "imm": x}


def _compute(op: str, xs: list[Any], out_dtype: str, shape: tuple[int, ...] | None = None,
             attrs: dict[str, Any] | None = None, length: int | None = None) -> Tensor:  # fmt: skip
    if shape is None:
        shape = tuple(np.broadcast_shapes(*[x.shape if isinstance(x, Tensor) else ()
                                            for x in xs]))
    ops = [_operand(x) for x in xs]
    line = kernel_line()
    buf = _prog().request("math", op=op, inputs=ops, shape=shape, dtype=out_dtype,
                          attrs=attrs or {}, line=line,
                          length=length if length is not None else int(np.prod(shape or (1,))))
    return Tensor("pending", shape, out_dtype, None, buf, f"{op} at {line}")


# ---------------------------------------------------------------------- tl API


def program_id(axis: int = 0) -> int:
    return _prog().pid[int(axis)]


def num_programs(axis: int = 0) -> int:
    return _prog().grid[int(axis)]


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
    dn = _dn(dtype)
    return Tensor("const", shape, dn, _store_const(np.full(shape, value), dn))


def zeros_like(x: Tensor) -> Tensor:
    return zeros(x.shape, x.dtype_name)


def cast(x: Any, dtype: Any, **_: Any) -> Tensor:
    x = _wrap(x)
    dn = _dn(dtype)
    if not isinstance(x, Tensor):
        x = const(x)
    if x.kind == "pointer":
        return Tensor("pointer", x.shape, dn, x.data, ptr_buf=x.ptr_buf)
    if x.dtype_name == dn:
        return x
    if x.kind == "const":
        from kernbench.sim_engine.math_ops import MATH_OPS

        r = MATH_OPS["cast"]([np.asarray(x.data).astype(np_dtype(x.dtype_name))], {"dtype": dn})
        return Tensor("const", x.shape, dn, _store_const(r, dn))
    return _compute("cast", [x], dn, attrs={"dtype": dn})


def _unary_api(op: str) -> Any:
    def f(x: Any, **_: Any) -> Tensor:
        return _unop(op, x)

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
    return _binop("maximum", a, b)


def minimum(a: Any, b: Any, **_: Any) -> Tensor:
    return _binop("minimum", a, b)


def fdiv(a: Any, b: Any, **_: Any) -> Tensor:
    return _binop("div", a, b)


def div_rn(a: Any, b: Any) -> Tensor:
    return _binop("div", a, b)


def where(cond: Any, x: Any, y: Any) -> Tensor:
    cond, x, y = _wrap(cond), _wrap(x), _wrap(y)
    out = _result_dtype("where", [x, y])
    if _all_const(cond, x, y):
        c = cond.data if isinstance(cond, Tensor) else cond
        xv = x.data if isinstance(x, Tensor) else x
        yv = y.data if isinstance(y, Tensor) else y
        r = np.where(np.asarray(c).astype(bool), xv, yv)
        return Tensor("const", r.shape, out, _store_const(r, out))
    if not isinstance(cond, Tensor):
        cond = const(np.bool_(cond))
    return _compute("where", [cond, x, y], out)


def _reduce(op: str, x: Any, axis: Any, keep_dims: bool) -> Tensor:
    x = _wrap(x)
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
        return Tensor("const", np.shape(r), dn, _store_const(np.asarray(r), dn))
    if op in ("argmax", "argmin"):
        dn = "int32"
    return _compute(op, [x], dn, shape=shape, attrs={"axis": ax, "keepdims": keep_dims},
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
    x = _wrap(x)
    dn = x.dtype_name if np_dtype(x.dtype_name).kind in "fV" else "float32"
    return _compute("softmax", [x], dn, attrs={"axis": axis})


def trans(x: Any, *dims: Any) -> Tensor:
    x = _wrap(x)
    perm = list(dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims) or None
    if x.kind in ("const", "pointer"):
        d = np.transpose(x.data, perm)
        return Tensor(x.kind, d.shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    shape = tuple(np.transpose(np.empty(x.shape, np.bool_), perm).shape)
    return _compute("transpose", [x], x.dtype_name, shape=shape, attrs={"perm": perm})


permute = trans


def reshape(x: Any, shape: Any, **_: Any) -> Tensor:
    x = _wrap(x)
    shape = tuple(int(s) for s in shape)
    if x.kind in ("const", "pointer"):
        d = np.reshape(x.data, shape)
        return Tensor(x.kind, d.shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    if math.prod(shape) != x.numel:
        raise KernelError(f"{kernel_line()}: cannot reshape {x.shape} to {shape}")
    data = None if x.data is None else np.reshape(x.data, shape)
    return Tensor(x.kind, shape, x.dtype_name, data, x.buf, x.origin)  # same bytes: a view


view = reshape


def expand_dims(x: Any, axis: int) -> Tensor:
    x = _wrap(x)
    shape = list(x.shape)
    shape.insert(axis % (len(shape) + 1), 1)
    return reshape(x, shape)


def broadcast_to(x: Any, shape: Any) -> Tensor:
    x = _wrap(x)
    shape = tuple(int(s) for s in shape)
    if x.kind in ("const", "pointer"):
        d = np.broadcast_to(x.data, shape).copy()
        return Tensor(x.kind, shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    return _compute("broadcast", [x], x.dtype_name, shape=shape)


def dot(a: Any, b: Any, acc: Any = None, input_precision: Any = None, allow_tf32: Any = None,
        max_num_imprecise_acc: Any = None, out_dtype: Any = float32) -> Tensor:  # fmt: skip
    """a (M, K) @ b (K, N) [+ acc] on pe_gemm."""
    return _gemm(a, b, acc, out_dtype, wait=True)[0]


def _gemm(a: Any, b: Any, acc: Any, out_dtype: Any, wait: bool) -> tuple[Tensor, Any]:
    a, b = _wrap(a), _wrap(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise KernelError(f"{kernel_line()}: tl.dot needs (M, K) @ (K, N), got {a.shape} @ "
                          f"{b.shape}")
    integer = np_dtype(a.dtype_name).kind in "iu" and np_dtype(b.dtype_name).kind in "iu"
    if acc is not None:
        acc = _wrap(acc)
        dn = acc.dtype_name
    else:
        dn = "int32" if integer else _dn(out_dtype)
    a, b = _materialise(a), _materialise(b)
    if acc is not None and acc.kind == "const" and not np.any(acc.data):
        acc = None
    elif acc is not None:
        acc = _materialise(acc)
    line = kernel_line()
    buf, handle = _prog().request("gemm", a=_operand(a), b=_operand(b),
                                  acc=None if acc is None else _operand(acc),
                                  shape=(a.shape[0], b.shape[1]), dtype=dn, line=line, wait=wait)
    return Tensor("pending", (a.shape[0], b.shape[1]), dn, None, buf, f"dot at {line}"), handle


def _materialise(x: Tensor) -> Tensor:
    if x.kind in ("loaded", "pending"):
        return x
    if x.kind == "pointer":
        raise KernelError(f"{kernel_line()}: a pointer is not a dot operand (tl.load it)")
    return _compute("copy", [x], x.dtype_name, shape=x.shape)


# ---------------------------------------------------------------------- memory


def _as_ptr(p: Any) -> Tensor:
    p = _wrap(p)
    if not isinstance(p, Tensor) or p.kind != "pointer":
        raise KernelError(f"{kernel_line()}: tl.load / tl.store need a pointer, got {p!r}")
    return p


def _mask_arr(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    if mask is None:
        return None
    m = _wrap(mask)
    if isinstance(m, Tensor):
        v = m._real("a mask")
    else:
        v = np.asarray(m)
    return np.broadcast_to(np.asarray(v).astype(bool), shape).copy()


def _bounds(p: Tensor, mask: np.ndarray | None, what: str, line: str) -> None:
    buf = p.ptr_buf
    isz = np_dtype(p.dtype_name).itemsize
    addrs = p.data if mask is None else p.data[mask]
    if buf is None or np.size(addrs) == 0:
        return
    bad = (addrs < buf.addr) | (addrs + isz > buf.addr + buf.nbytes)
    if np.any(bad):
        offs = ((np.asarray(addrs)[bad] - buf.addr) // isz).reshape(-1)
        shown = ", ".join(str(int(o)) for o in offs[:8]) + (" ..." if offs.size > 8 else "")
        raise KernelError(
            f"{line}: {what} out of bounds of buffer '{buf.name}' ({buf.numel} elements of "
            f"{buf.dtype}): element offsets [{shown}] ({offs.size} lanes"
            f"{'' if mask is None else ' not covered by the mask'})"
        )


def load(pointer: Any, mask: Any = None, other: Any = None, boundary_check: Any = None,
         padding_option: Any = "", cache_modifier: Any = "", eviction_policy: Any = "",
         volatile: bool = False) -> Tensor:  # fmt: skip
    p = _as_ptr(pointer)
    line = kernel_line()
    m = _mask_arr(mask, p.shape)
    _bounds(p, m, "tl.load", line)
    oth = 0 if other is None else other
    if isinstance(oth, Tensor):
        oth = np.asarray(oth._real("the 'other' value")).astype(np_dtype(p.dtype_name))
    buf, data = _prog().request("load", addrs=p.data, mask=m, other=oth, dtype=p.dtype_name,
                                shape=p.shape, line=line, ptr=p)
    kind = "loaded" if data is not None else "pending"
    return Tensor(kind, p.shape, p.dtype_name, data, buf, f"tl.load at {line}")


def store(pointer: Any, value: Any, mask: Any = None, boundary_check: Any = None,
          cache_modifier: Any = "", eviction_policy: Any = "") -> None:  # fmt: skip
    p = _as_ptr(pointer)
    line = kernel_line()
    v = _wrap(value)
    m = _mask_arr(mask, p.shape)
    _bounds(p, m, "tl.store", line)
    dn = p.dtype_name
    if not isinstance(v, Tensor):
        v = full(p.shape, v, dn)
    if v.dtype_name != dn:
        v = cast(v, dn)
    if v.shape != p.shape:
        v = broadcast_to(v, p.shape)
    _prog().request("store", addrs=p.data, mask=m, value=_operand(v), dtype=dn, shape=p.shape,
                    line=line, real=None if v.kind == "pending" else np.asarray(
                        v.data).astype(np_dtype(dn)))


# ---------------------------------------------------------------------- NPU extensions


class Handle:
    """An async composite op in flight; `tl.wait(handle)` waits for it (timing only)."""

    __slots__ = ("result", "done", "op")

    def __init__(self, result: Tensor, done: Any, op: str) -> None:
        self.result = result
        self.done = done
        self.op = op

    def __repr__(self) -> str:
        return f"<tl.Handle {self.op}>"


def composite(op: str, *args: Any, **kw: Any) -> Handle:
    """NPU composite command, issued asynchronously; returns a Handle.

    op="gemm": composite(op="gemm", a=, b=, acc=None, out_dtype=tl.float32)
    op="math": composite(op="math", fn="exp", inputs=[x, ...], axis=None, dtype=None, **attrs)

    The result of an unwaited composite is NOT tracked: a consumer issued before
    `tl.wait(handle)` races with it (pass 2 then shows the stale data)."""
    if op == "gemm":
        a = kw.pop("a", args[0] if args else None)
        b = kw.pop("b", args[1] if len(args) > 1 else None)
        res, h = _gemm(a, b, kw.pop("acc", None), kw.pop("out_dtype", float32), wait=False)
        return Handle(res, h, "gemm")
    if op == "math":
        fn = kw.pop("fn")
        ins = [_wrap(x) for x in kw.pop("inputs", args)]
        dn = _dn(kw.pop("dtype", None) or ins[0].dtype_name)
        axis = kw.get("axis")
        shape = tuple(np.broadcast_shapes(*[x.shape if isinstance(x, Tensor) else ()
                                            for x in ins]))
        if axis is not None and fn in ("sum", "reduce_max", "reduce_min"):
            shape = tuple(d for i, d in enumerate(shape) if i != axis % len(shape))
        ops = [_operand(x) for x in ins]
        line = kernel_line()
        buf, done = _prog().request("math", op=fn, inputs=ops, shape=shape, dtype=dn,
                                    attrs=kw, line=line, length=int(np.prod(shape or (1,))),
                                    untracked=True)
        return Handle(Tensor("pending", shape, dn, None, buf, f"composite {fn} at {line}"),
                      done, fn)
    raise KernelError(f"{kernel_line()}: tl.composite op must be 'gemm' or 'math', got {op!r}")


def wait(handle: Handle) -> Tensor:
    _prog().request("wait", handle=handle)
    return handle.result


# ---------------------------------------------------------------------- misc


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
