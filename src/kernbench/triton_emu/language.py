"""`kernbench.tl`: the triton.language subset real kernels use.

This module is the public namespace only; the pieces live in
- context.py: the running program, KernelError / PendingValueError, `kernel_line`;
- dtypes.py: `tl.float32` ... and `constexpr`;
- tensor.py: `Tensor` (const / loaded / pending / pointer values), element-wise core,
  cast, trans, reshape;
- ops.py: program ids, constructors, math, reductions, shapes, `dot`, hints;
- memory.py: load / store, `composite` / `wait`.
They import one another in that order only (no import circle); the runner (runner.py)
and launch (runtime.py) sit on top.
"""

from __future__ import annotations

from kernbench.triton_emu.context import KernelError, PendingValueError, kernel_line
from kernbench.triton_emu.dtypes import (
    bf16,
    bfloat16,
    constexpr,
    dtype,
    float8e4nv,
    float16,
    float32,
    float64,
    fp16,
    fp32,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint32,
)
from kernbench.triton_emu.memory import Handle, composite, load, store, wait
from kernbench.triton_emu.ops import (
    abs,
    arange,
    argmax,
    argmin,
    assume,
    broadcast_to,
    cdiv,
    ceil,
    cos,
    debug_barrier,
    device_assert,
    device_print,
    div_rn,
    dot,
    erf,
    exp,
    exp2,
    expand_dims,
    fdiv,
    floor,
    full,
    log,
    log2,
    max,
    max_constancy,
    max_contiguous,
    maximum,
    min,
    minimum,
    multiple_of,
    next_power_of_2,
    num_programs,
    program_id,
    range,
    rsqrt,
    sigmoid,
    sin,
    softmax,
    sqrt,
    sqrt_rn,
    static_assert,
    static_print,
    static_range,
    sum,
    tanh,
    where,
    zeros,
    zeros_like,
)
from kernbench.triton_emu.tensor import Tensor, cast, const, permute, reshape, tensor, trans, view

__all__ = [
    "Handle", "KernelError", "PendingValueError", "Tensor", "abs", "arange", "argmax",
    "argmin", "assume", "bf16", "bfloat16", "broadcast_to", "cast", "cdiv", "ceil",
    "composite", "const", "constexpr", "cos", "debug_barrier", "device_assert",
    "device_print", "div_rn", "dot", "dtype", "erf", "exp", "exp2", "expand_dims", "fdiv",
    "float16", "float32", "float64", "float8e4nv", "floor", "fp16", "fp32", "full", "int1",
    "int16", "int32", "int64", "int8", "kernel_line", "load", "log", "log2", "max",
    "max_constancy", "max_contiguous", "maximum", "min", "minimum", "multiple_of",
    "next_power_of_2", "num_programs", "permute", "program_id", "range", "reshape", "rsqrt",
    "sigmoid", "sin", "softmax", "sqrt", "sqrt_rn", "static_assert", "static_print",
    "static_range", "store", "sum", "tanh", "tensor", "trans", "uint32", "uint8", "view",
    "wait", "where", "zeros", "zeros_like",
]  # fmt: skip
