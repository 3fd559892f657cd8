"""Where tensors live in HBM: placements (views of storage) and the allocation plan.

- a *placement* is (storage key, address, shape, element strides, dtype); views share
  their source's storage (reshape of contiguous data, folded transposes);
- an *allocation* is one storage: its role, dtype, shape, bytes and one address per copy;
- the `MemoryPlan` bumps addresses per cube (256-byte aligned) and checks that no two
  allocations overlap (`verify`). It is the typed product of the `memory` pass and is
  extended by the tiling pass (constants in the representation a lowering chooses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernbench.errors import InputError
from kernbench.numerics.dtypes import bits as dtype_bits

ALIGN = 256
#: bytes per element of the dtypes the compiler places (numerics.dtypes; int4 packed)
ITEMSIZE = {n: dtype_bits(n) // 8 if dtype_bits(n) % 8 == 0 else dtype_bits(n) / 8 for n in (
    "fp32", "fp16", "bf16", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool", "int4",
    "uint16", "uint32", "uint64")}

def nbytes_of(shape: tuple[int, ...] | list[int], dtype: str) -> int:
    n = int(np.prod(shape)) if len(shape) else 1
    return int(np.ceil(n * ITEMSIZE[dtype]))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


@dataclass(frozen=True)
class Placement:
    key: str                      # storage key (dependency tracking, memory.json)
    addr: int                     # address of element 0 (cube 0 copy)
    shape: tuple[int, ...]
    strides: tuple[int, ...]      # element strides
    dtype: str
    replicas: tuple[int, ...] = ()  # per-cube addresses of element 0 (constants, inputs)

    @property
    def contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    def addr_in(self, cube: int) -> int:
        return self.replicas[cube] if self.replicas else self.addr

    def offset_of(self, cube: int, base_offset_elems: int) -> int:
        return self.addr_in(cube) + int(base_offset_elems * ITEMSIZE[self.dtype])


@dataclass
class Allocation:
    key: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    addrs: tuple[int, ...]        # one per copy (cube order); one entry if not replicated
    source: str | None = None     # IR tensor id it holds (or derives from)
    data: np.ndarray | None = field(default=None, repr=False)  # host data (constants)


class MemoryPlan:
    def __init__(self, n_cubes: int, cube_bytes: int) -> None:
        self.n_cubes = n_cubes
        self.cube_bytes = cube_bytes
        self._next = [c * cube_bytes for c in range(n_cubes)]
        self.allocations: dict[str, Allocation] = {}
        self.placements: dict[str, Placement] = {}
        self.scales: dict[str, float] = {}  # storage key → scale of a quantized activation
        # HBM reuse by liveness: storage key → last layer position a tensor in it is read
        self._busy_until: dict[str, int] = {}

    def _bump(self, cube: int, nbytes: int) -> int:
        a = self._next[cube]
        self._next[cube] = a + -(-max(nbytes, 1) // ALIGN) * ALIGN
        if self._next[cube] > (cube + 1) * self.cube_bytes:
            raise InputError(f"model does not fit in cube {cube}'s HBM ({self.cube_bytes} B)")
        return a

    def allocate(self, key: str, shape, dtype: str, role: str, *, replicate: bool = False,
                 source: str | None = None, data: np.ndarray | None = None,
                 live: tuple[int, int] | None = None) -> Allocation:
        """A new storage, 256-byte aligned in cube 0 (or every cube with `replicate`).

        `live` = (first, last) layer positions (compiler.liveness): the tensor may take the
        space of an earlier storage whose tensors are all dead before `first`. It then gets
        that storage's key (the returned Allocation is a view, not a new entry): the
        schedule orders HBM accesses per storage key by byte overlap, so the reuse gets its
        WAR/WAW edges with no change there."""
        if key in self.allocations:
            return self.allocations[key]
        nb = nbytes_of(shape, dtype)
        if live is not None and not replicate:
            for rkey, until in self._busy_until.items():  # insertion order: deterministic
                r = self.allocations[rkey]
                if until < live[0] and r.nbytes >= nb and len(r.addrs) == 1:
                    self._busy_until[rkey] = live[1]
                    return Allocation(rkey, role, dtype, tuple(shape), nb, r.addrs, source)
        cubes = range(self.n_cubes) if replicate else (0,)
        addrs = tuple(self._bump(c, nb) for c in cubes)
        a = Allocation(key, role, dtype, tuple(shape), nb, addrs, source, data)
        self.allocations[key] = a
        if live is not None and not replicate:
            self._busy_until[key] = live[1]
        return a

    def place(self, tid: str, alloc: Allocation, shape=None, strides=None) -> Placement:
        shape = tuple(alloc.shape if shape is None else shape)
        p = Placement(alloc.key, alloc.addrs[0], shape,
                      tuple(strides) if strides is not None else contiguous_strides(shape),
                      alloc.dtype, alloc.addrs if len(alloc.addrs) > 1 else ())
        self.placements[tid] = p
        return p

    def constant(self, key: str, array: np.ndarray, dtype: str, role: str = "weight",
                 source: str | None = None, shape: tuple[int, ...] | None = None) -> Placement:
        """A replicated constant (weights, scale vectors, biases). `shape` is the logical
        shape when `array` is a packed encoding of it (int4: two values per byte)."""
        shape = tuple(array.shape if shape is None else shape)
        a = self.allocate(key, shape, dtype, role, replicate=True, source=source, data=array)
        if a.data is not None and a.dtype == "int4" and np.asarray(a.data).nbytes != a.nbytes:
            raise ValueError(f"{key}: {np.asarray(a.data).nbytes} packed bytes for a "
                             f"{a.nbytes}-byte int4 allocation")
        return Placement(key, a.addrs[0], shape, contiguous_strides(shape), dtype,
                         a.addrs if len(a.addrs) > 1 else ())

    def verify(self) -> None:
        spans = []
        for a in self.allocations.values():
            for addr in a.addrs:
                spans.append((addr, addr + a.nbytes, a.key))
        spans.sort()
        for (_s0, e0, k0), (s1, _e1, k1) in zip(spans, spans[1:], strict=False):
            if s1 < e0:
                raise InputError(f"memory plan: '{k0}' and '{k1}' overlap in HBM")

    def to_json(self) -> dict[str, Any]:
        out = {}
        for key in sorted(self.allocations):
            a = self.allocations[key]
            out[key] = {"role": a.role, "dtype": a.dtype, "shape": list(a.shape),
                        "nbytes": a.nbytes, "address": a.addrs[0],
                        "replicas": list(a.addrs) if len(a.addrs) > 1 else [],
                        "tensor": a.source}
        return {"version": "1.0", "tensors": out,
                "views": {tid: dict({"storage": p.key, "address": p.addr, "shape": list(p.shape),
                                     "strides": list(p.strides), "dtype": p.dtype},
                                    **({"scale": self.scales[p.key]} if p.key in self.scales
                                       else {}))
                          for tid, p in sorted(self.placements.items())}}
