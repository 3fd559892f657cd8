"""tl values: `Tensor` and the element-wise core every tl op builds on.

Values are `Tensor`s of four kinds:
- "const": host-known data (arange, zeros, full, Python scalars and arithmetic among
  them). Index math; computed eagerly with numpy in pass 1, at no simulated cost.
- "loaded": the result of `tl.load`: real data in pass 1 (control flow may depend on
  it) that also lives in the PE's TCM.
- "pending": a compute result (pe_math / pe_gemm). It lives in TCM; its data exists only
  after pass 2, and touching it in pass 1 raises PendingValueError.
- "pointer": a block of element addresses into a device buffer (pointer + offsets).

Any op with a loaded or pending operand is issued to the simulated PE (pe_math or
pe_gemm) through the running program (`context.prog()`) and returns a pending value.
Host objects that stand for a pointer (a DeviceBuffer) expose `__tl_pointer__()`.
"""

from __future__ import annotations

import builtins as _b
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from kernbench.numerics.dtypes import canon, np_dtype
from kernbench.sim_engine.math_ops import MATH_OPS
from kernbench.triton_emu.context import (
    CTX,
    KernelError,
    PendingValueError,
    kernel_line,
    prog,
)
from kernbench.triton_emu.dtypes import PtrType, constexpr, dtype, dtype_name


class Tensor:
    __slots__ = ("kind", "shape", "dtype_name", "data", "buf", "origin", "ptr_buf", "__weakref__")

    def __init__(self, kind: str, shape: tuple[int, ...], dtype_name: str, data: Any = None,
                 buf: Any = None, origin: str = "", ptr_buf: Any = None) -> None:  # fmt: skip
        p = CTX[0]
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
            return PtrType(self.dtype_name)
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
                f"pass 1: compute results are pending until the data pass; "
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
        return binop("add", self, o)

    def __radd__(self, o: Any) -> Tensor:
        return binop("add", o, self)

    def __sub__(self, o: Any) -> Tensor:
        return binop("sub", self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return binop("sub", o, self)

    def __mul__(self, o: Any) -> Tensor:
        return binop("mul", self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return binop("mul", o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return binop("div", self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return binop("div", o, self)

    def __floordiv__(self, o: Any) -> Tensor:
        return binop("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return binop("floordiv", o, self)

    def __mod__(self, o: Any) -> Tensor:
        return binop("mod", self, o)

    def __rmod__(self, o: Any) -> Tensor:
        return binop("mod", o, self)

    def __neg__(self) -> Tensor:
        return unop("neg", self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return unop("abs", self)

    def __invert__(self) -> Tensor:
        return unop("not", self)

    def __and__(self, o: Any) -> Tensor:
        return binop("and", self, o)

    def __rand__(self, o: Any) -> Tensor:
        return binop("and", o, self)

    def __or__(self, o: Any) -> Tensor:
        return binop("or", self, o)

    def __ror__(self, o: Any) -> Tensor:
        return binop("or", o, self)

    def __xor__(self, o: Any) -> Tensor:
        return binop("xor", self, o)

    def __lt__(self, o: Any) -> Tensor:
        return binop("less", self, o)

    def __le__(self, o: Any) -> Tensor:
        return binop("less_equal", self, o)

    def __gt__(self, o: Any) -> Tensor:
        return binop("greater", self, o)

    def __ge__(self, o: Any) -> Tensor:
        return binop("greater_equal", self, o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return binop("equal", self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return binop("not_equal", self, o)


tensor = Tensor


def const(data: Any, dtype_name: str | None = None) -> Tensor:
    a = np.asarray(data)
    dn = dtype_name or _default_dtype(a)
    return Tensor("const", a.shape, dn, store_const(a, dn))


def _default_dtype(a: np.ndarray) -> str:
    if a.dtype.kind == "b":
        return "bool"
    if a.dtype.kind in "iu":
        return "int64" if a.dtype.itemsize > 4 and a.dtype.name.startswith("u") else "int32"
    if a.dtype == np.float64:
        return "float32"
    return canon(a.dtype)


def store_const(a: np.ndarray, dn: str) -> np.ndarray:
    """Const ints are kept in int64 (index math must not overflow); floats in their dtype."""
    dt = np_dtype(dn)
    if dt.kind in "iu":
        return np.asarray(a).astype(np.int64)
    return np.asarray(a).astype(dt)


def wrap(x: Any) -> Any:
    """Tensor stays; Python scalar stays (weak); ndarray → const."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, bool | int | float):
        return x
    if isinstance(x, np.ndarray | np.generic):
        return const(x)
    if isinstance(x, constexpr):
        return x.value
    if hasattr(x, "__tl_pointer__"):  # a DeviceBuffer (triton_emu.device)
        return x.__tl_pointer__()
    raise KernelError(f"{kernel_line()}: unsupported operand {type(x).__name__}")


def _dtype_of(x: Any) -> Any:
    if isinstance(x, Tensor):
        return np_dtype(x.dtype_name)
    return x  # python scalar: weak


def result_dtype(op: str, xs: list[Any]) -> str:
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
    return store_const(np.asarray(r), out)


def binop(op: str, a: Any, b: Any) -> Tensor:
    a, b = wrap(a), wrap(b)
    if isinstance(a, Tensor) and a.kind == "pointer" or isinstance(b, Tensor) and \
            b.kind == "pointer":
        return _ptr_arith(op, a, b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return const(_NP_BIN[op](a, b) if op in _NP_BIN else a / b)
    out = result_dtype("floordiv" if op == "floordiv" else op, [a, b])
    if all_const(a, b) or _scalar_real(a, b):
        data = _eager_bin(op, a, b, out)
        return Tensor("const", data.shape, out, data)
    if op == "floordiv":
        return compute("div", [a, b], out, attrs={"int_div": True})
    return compute(op, [a, b], out)


def _scalar_real(*xs: Any) -> bool:
    """Scalar ops on real data (loaded scalars) run on the PE's scalar unit in pass 1."""
    ts = [x for x in xs if isinstance(x, Tensor)]
    return all(t.kind in ("const", "loaded") and t.data is not None and t.numel == 1
               for t in ts)


def all_const(*xs: Any) -> bool:
    return all(not isinstance(x, Tensor) or x.kind == "const" for x in xs)


def _ptr_arith(op: str, a: Any, b: Any) -> Tensor:
    if op == "sub" and isinstance(a, Tensor) and a.kind == "pointer" and not (
            isinstance(b, Tensor) and b.kind == "pointer"):
        return _ptr_arith("add", a, binop("mul", b, -1) if isinstance(b, Tensor) else -b)
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


def unop(op: str, x: Any) -> Tensor:
    x = wrap(x)
    if not isinstance(x, Tensor):
        x = const(x)
    if x.kind == "const":
        with np.errstate(all="ignore"):
            fn = {"neg": np.negative, "abs": np.abs, "not": np.invert if x.data.dtype.kind
                  in "iu" else np.logical_not}.get(op)
            if fn is None:
                r = MATH_OPS[op]([x.data.astype(np.float32) if x.data.dtype.kind in "iu"
                                  else x.data], {"op": op})
                dn = x.dtype_name if np_dtype(x.dtype_name).kind == "f" else "float32"
            else:
                r = fn(x.data)
                dn = x.dtype_name
        return Tensor("const", np.shape(r), dn, store_const(np.asarray(r), dn))
    dn = x.dtype_name
    if op not in ("neg", "abs", "not") and np_dtype(dn).kind not in "fV":
        dn = "float32"
    return compute(op, [x], dn)


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
        return Tensor("const", d.shape, x.dtype_name, store_const(d, x.dtype_name))
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


def operand(x: Any, dn: str | None = None) -> dict[str, Any]:
    if isinstance(x, Tensor) and x.kind in ("loaded", "pending"):
        return {"buf": x.buf, "shape": x.shape, "dtype": x.dtype_name}
    if isinstance(x, Tensor):
        return {"buf": None, "shape": x.shape, "dtype": x.dtype_name,
                "imm": np.asarray(x.data).astype(np_dtype(x.dtype_name))}
    return {"buf": None, "shape": (), "dtype": None, "imm": x}


def compute(op: str, xs: list[Any], out_dtype: str, shape: tuple[int, ...] | None = None,
             attrs: dict[str, Any] | None = None, length: int | None = None) -> Tensor:  # fmt: skip
    if shape is None:
        shape = tuple(np.broadcast_shapes(*[x.shape if isinstance(x, Tensor) else ()
                                            for x in xs]))
    ops = [operand(x) for x in xs]
    line = kernel_line()
    buf = prog().request("math", op=op, inputs=ops, shape=shape, dtype=out_dtype,
                          attrs=attrs or {}, line=line,
                          length=length if length is not None else int(np.prod(shape or (1,))))
    return Tensor("pending", shape, out_dtype, None, buf, f"{op} at {line}")


def cast(x: Any, dtype: Any, **_: Any) -> Tensor:
    x = wrap(x)
    dn = dtype_name(dtype)
    if not isinstance(x, Tensor):
        x = const(x)
    if x.kind == "pointer":
        return Tensor("pointer", x.shape, dn, x.data, ptr_buf=x.ptr_buf)
    if x.dtype_name == dn:
        return x
    if x.kind == "const":
        r = MATH_OPS["cast"]([np.asarray(x.data).astype(np_dtype(x.dtype_name))], {"dtype": dn})
        return Tensor("const", x.shape, dn, store_const(r, dn))
    return compute("cast", [x], dn, attrs={"dtype": dn})


def trans(x: Any, *dims: Any) -> Tensor:
    x = wrap(x)
    perm = list(dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims) or None
    if x.kind in ("const", "pointer"):
        d = np.transpose(x.data, perm)
        return Tensor(x.kind, d.shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    shape = tuple(np.transpose(np.empty(x.shape, np.bool_), perm).shape)
    return compute("transpose", [x], x.dtype_name, shape=shape, attrs={"perm": perm})


permute = trans


def reshape(x: Any, shape: Any, **_: Any) -> Tensor:
    x = wrap(x)
    shape = tuple(int(s) for s in shape)
    if x.kind in ("const", "pointer"):
        d = np.reshape(x.data, shape)
        return Tensor(x.kind, d.shape, x.dtype_name, d, ptr_buf=x.ptr_buf)
    if math.prod(shape) != x.numel:
        raise KernelError(f"{kernel_line()}: cannot reshape {x.shape} to {shape}")
    data = None if x.data is None else np.reshape(x.data, shape)
    return Tensor(x.kind, shape, x.dtype_name, data, x.buf, x.origin)  # same bytes: a view


view = reshape

