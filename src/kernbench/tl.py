"""`from kernbench import tl`: the triton.language subset (see kernbench.triton_emu)."""

from kernbench.triton_emu.language import *  # noqa: F403
from kernbench.triton_emu.language import (  # noqa: F401
    Handle,
    KernelError,
    PendingValueError,
    Tensor,
    abs,
    cdiv,
    composite,
    constexpr,
    dtype,
    max,
    min,
    range,
    sum,
    tensor,
    wait,
)
