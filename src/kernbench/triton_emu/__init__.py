"""The tl front end: the triton.language API (language.py and the modules it gathers),
@jit / launch (runtime.py), device buffers (device.py) and the greenlet KernelRunner
(runner.py). Public as `kernbench.tl`, `kernbench.jit`, ..."""

from kernbench.triton_emu.runtime import (
    DEVICE,
    Config,
    DeviceBuffer,
    JITFunction,
    KernelRunner,
    LaunchResult,
    autotune,
    cdiv,
    empty,
    heuristics,
    jit,
    launch,
    next_power_of_2,
    roofline,
    to_device,
    zeros,
)

__all__ = [
    "DEVICE", "Config", "DeviceBuffer", "JITFunction", "KernelRunner", "LaunchResult",
    "autotune", "cdiv", "empty", "heuristics", "jit", "launch", "next_power_of_2", "roofline",
    "to_device", "zeros",
]  # fmt: skip
