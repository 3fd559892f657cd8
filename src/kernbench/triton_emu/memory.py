"""tl memory ops and the NPU extensions: load / store with masks and bounds checks, and
the asynchronous `composite` / `wait` pair."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.dtypes import np_dtype
from kernbench.triton_emu.context import KernelError, kernel_line, prog
from kernbench.triton_emu.dtypes import dtype_name, float32
from kernbench.triton_emu.ops import broadcast_to, full, gemm
from kernbench.triton_emu.tensor import Tensor, cast, operand, wrap


def _as_ptr(p: Any) -> Tensor:
    p = wrap(p)
    if not isinstance(p, Tensor) or p.kind != "pointer":
        raise KernelError(f"{kernel_line()}: tl.load / tl.store need a pointer, got {p!r}")
    return p


def _mask_arr(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    if mask is None:
        return None
    m = wrap(mask)
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
    buf, data = prog().request("load", addrs=p.data, mask=m, other=oth, dtype=p.dtype_name,
                                shape=p.shape, line=line, ptr=p)
    kind = "loaded" if data is not None else "pending"
    return Tensor(kind, p.shape, p.dtype_name, data, buf, f"tl.load at {line}")


def store(pointer: Any, value: Any, mask: Any = None, boundary_check: Any = None,
          cache_modifier: Any = "", eviction_policy: Any = "") -> None:  # fmt: skip
    p = _as_ptr(pointer)
    line = kernel_line()
    v = wrap(value)
    m = _mask_arr(mask, p.shape)
    _bounds(p, m, "tl.store", line)
    dn = p.dtype_name
    if not isinstance(v, Tensor):
        v = full(p.shape, v, dn)
    if v.dtype_name != dn:
        v = cast(v, dn)
    if v.shape != p.shape:
        v = broadcast_to(v, p.shape)
    prog().request("store", addrs=p.data, mask=m, value=operand(v), dtype=dn, shape=p.shape,
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
        res, h = gemm(a, b, kw.pop("acc", None), kw.pop("out_dtype", float32), wait=False)
        return Handle(res, h, "gemm")
    if op == "math":
        fn = kw.pop("fn")
        ins = [wrap(x) for x in kw.pop("inputs", args)]
        dn = dtype_name(kw.pop("dtype", None) or ins[0].dtype_name)
        axis = kw.get("axis")
        shape = tuple(np.broadcast_shapes(*[x.shape if isinstance(x, Tensor) else ()
                                            for x in ins]))
        if axis is not None and fn in ("sum", "reduce_max", "reduce_min"):
            shape = tuple(d for i, d in enumerate(shape) if i != axis % len(shape))
        ops = [operand(x) for x in ins]
        line = kernel_line()
        buf, done = prog().request("math", op=fn, inputs=ops, shape=shape, dtype=dn,
                                    attrs=kw, line=line, length=int(np.prod(shape or (1,))),
                                    untracked=True)
        return Handle(Tensor("pending", shape, dn, None, buf, f"composite {fn} at {line}"),
                      done, fn)
    raise KernelError(f"{kernel_line()}: tl.composite op must be 'gemm' or 'math', got {op!r}")


def wait(handle: Handle) -> Tensor:
    prog().request("wait", handle=handle)
    return handle.result
