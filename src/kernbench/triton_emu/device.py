"""The simulated device memory and host-side buffers (DeviceBuffer, to_device, empty).

HBM contents persist across launches in `DEVICE.store` (a MemoryStore); buffers are
allocated bump-pointer from address 0, 256-byte aligned. A DeviceBuffer passed to a
kernel or to a tl op becomes a pointer tensor (`__tl_pointer__`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.dtypes import canon, nbytes_of, np_dtype
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.triton_emu.tensor import Tensor

HBM_SPACE = 1 << 40
_ALIGN = 256


class Device:
    """The simulated device memory: HBM contents that persist across launches."""

    def __init__(self) -> None:
        self.store = MemoryStore({"hbm": HBM_SPACE})
        self.next_addr = 0
        self.count = 0

    def alloc(self, nbytes: int) -> int:
        addr = self.next_addr
        self.next_addr += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return addr

    def reset(self) -> None:
        self.__init__()


DEVICE = Device()


class DeviceBuffer:
    """A tensor in simulated HBM. Pass it to a kernel as a pointer; `.numpy()` reads it."""

    def __init__(self, shape: Any, dtype: Any, name: str = "", replicate: bool = False) -> None:
        #: a read-only input the host also copies into every cube's HBM (same offset):
        #: loads use the copy in the loading PE's cube
        self.replicate = replicate
        self.shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(
            int(s) for s in shape)
        self.dtype = canon(dtype)
        self.numel = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = nbytes_of(self.shape, self.dtype)
        self.addr = DEVICE.alloc(self.nbytes)
        DEVICE.count += 1
        self.name = name or f"buf{DEVICE.count}"

    def pointer(self) -> Tensor:
        """A scalar pointer tensor to element 0."""
        return Tensor("pointer", (), self.dtype, np.int64(self.addr), ptr_buf=self)

    __tl_pointer__ = pointer  # how tl ops turn a host buffer into a pointer operand

    def numpy(self) -> np.ndarray:
        return np.array(DEVICE.store.read("hbm", self.addr, self.shape, self.dtype))

    def stride(self, dim: int | None = None) -> Any:
        st = tuple(int(np.prod(self.shape[i + 1:], dtype=np.int64)) for i in range(len(self.shape)))
        return st if dim is None else st[dim]

    def element_size(self) -> int:
        return np_dtype(self.dtype).itemsize

    def numel_(self) -> int:
        return self.numel

    def __repr__(self) -> str:
        return f"<DeviceBuffer {self.name} {list(self.shape)} {self.dtype} @hbm:{self.addr:#x}>"


def to_device(array: Any, name: str = "", replicate: bool = False) -> DeviceBuffer:
    """Copy `array` into simulated HBM. With `replicate=True` the host also deploys it into
    every cube (the buffer is then read-only for kernels: loads read their own cube's copy,
    so a PE on cube 3 does not cross UCIe to reach it)."""
    a = np.ascontiguousarray(np.array(array))
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    b = DeviceBuffer(a.shape, a.dtype, name, replicate)
    DEVICE.store.write("hbm", b.addr, a.copy())
    return b


def empty(shape: Any, dtype: Any = "float32", name: str = "") -> DeviceBuffer:
    """A zero-filled device buffer (reads of it are defined, unlike torch.empty)."""
    b = DeviceBuffer(shape, dtype, name)
    DEVICE.store.write_bytes("hbm", b.addr, np.zeros(b.nbytes, np.uint8))
    return b


def zeros(shape: Any, dtype: Any = "float32", name: str = "") -> DeviceBuffer:
    return empty(shape, dtype, name)


def cdiv(a: int, b: int) -> int:
    """Host-side ceil(a / b) for grids."""
    return -(-int(a) // int(b))
