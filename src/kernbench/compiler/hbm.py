"""Where tensors live in HBM: placements (views of storage) and the allocation plan.

- a *placement* is (storage key, address, shape, element strides, dtype); views share
  their source's storage (reshape of contiguous data, folded transposes);
- an *allocation* is one storage: its role, dtype, shape, bytes and one address per copy;
- a *spread* allocation splits its rows over the cubes: part c (a contiguous run of rows)
  lives in cube c's HBM, so the PEs of cube c read and write their rows locally. Its
  placements keep one *logical* address space (part 0's address onward, used for the
  schedule's dependencies) and map a logical byte to its part's physical address
  (`Placement.parts`); a DMA that crosses a part boundary is split (`Placement.runs`);
- the `MemoryPlan` bumps addresses per cube (256-byte aligned) and checks that no two
  allocations overlap (`verify`). It is the typed product of the `memory` pass and is
  extended by the tiling pass (constants in the representation a lowering chooses).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kernbench.errors import InputError
from kernbench.numerics.block_float import FORMATS as BFP_FORMATS
from kernbench.numerics.block_float import block_float
from kernbench.numerics.dtypes import bits as dtype_bits

ALIGN = 256
#: a storage is spread over the cubes only when each cube gets at least this many rows
MIN_ROWS_PER_CUBE = 8
#: ... and at least this many bytes: a smaller part saves less than the remote command
#: and completion trips its tiles pay (tiny GPT-2 attention and BERT's QDQ chains on base:
#: 1-8 KiB parts in far cubes made the models slower than on one cube)
MIN_PART_BYTES = 16384
#: distributed constants (`MemoryPlan.replicate_constants` False): a constant of at most
#: this many bytes (a norm's scale, a bias, a scale vector) is still copied into every
#: cube, so that no tile waits on a remote trip for a few hundred bytes
SMALL_CONSTANT_BYTES = 65536
#: bytes per element of the dtypes the compiler places (numerics.dtypes; int4 packed; the
#: block floats with their shared exponents, numerics.block_float)
ITEMSIZE = {n: dtype_bits(n) // 8 if dtype_bits(n) % 8 == 0 else dtype_bits(n) / 8 for n in (
    "fp32", "fp16", "bf16", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool", "int4",
    "uint16", "uint32", "uint64")} | {f: block_float(f).bytes_per_element for f in BFP_FORMATS}
#: the packed encodings whose array form is their bytes (uint8) rather than their values
PACKED_BYTES = ("int4", *BFP_FORMATS)

class HbmFullError(InputError):
    """A cube's HBM has no room for an allocation (the memory pass then tries the layout
    placed once: compiler.weights_fit)."""


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
    #: spread storage: (first logical byte, end logical byte, physical address of the first)
    parts: tuple[tuple[int, int, int], ...] = ()

    @property
    def contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
             dtype: str | None = None) -> Placement:
        """The same storage seen with another shape / strides (/ dtype of equal size)."""
        shape = tuple(shape)
        return replace(self, shape=shape, dtype=dtype or self.dtype,
                       strides=tuple(strides) if strides is not None
                       else contiguous_strides(shape))

    def part_of(self, logical: int) -> int:
        """Index of the part holding logical byte `logical` (spread storage)."""
        for i, (lo, hi, _) in enumerate(self.parts):
            if lo <= logical < hi:
                return i
        raise ValueError(f"{self.key}: byte {logical:#x} is outside its parts")

    def physical(self, logical: int) -> int:
        lo, _, phys = self.parts[self.part_of(logical)]
        return phys + logical - lo

    def runs(self, elem_off: int, rows: int, row_elems: int,
             row_stride: int) -> list[tuple[int, int, int, int]]:
        """A strided access (rows × row_elems, rows `row_stride` elements apart) cut into
        runs that each lie in one part: (first row, rows, first element within the row,
        elements per row). A run of several rows covers whole rows; a row that crosses a
        part boundary becomes one run per part."""
        isz = ITEMSIZE[self.dtype]
        if rows > 0 and row_elems > 0 and row_stride >= 0:
            # rows in address order: when the first starts and the last ends in one part,
            # every row lies in it and they make one run
            first = self.part_of(self.addr + int(elem_off * isz))
            end = self.addr + int(math.ceil((elem_off + (rows - 1) * row_stride + row_elems)
                                            * isz))
            if end <= self.parts[first][1]:
                return [(0, rows, 0, row_elems)]
        out: list[tuple[int, int, int, int]] = []
        last_part = -1
        r = 0
        while r < rows:
            lo = self.addr + int((elem_off + r * row_stride) * isz)
            i = self.part_of(lo)
            end = self.parts[i][1]
            if self._row_end(elem_off, r, row_stride, row_elems, isz) <= end:
                # the rows from r on that end in part i lie in it (their starts follow r's
                # when the stride is not negative): one run, its last row found by bisection
                n = 1
                if row_stride >= 0:
                    a, b = r, rows - 1  # a ends in the part; find the last row that does
                    while a < b:
                        m = (a + b + 1) // 2
                        if self._row_end(elem_off, m, row_stride, row_elems, isz) <= end:
                            a = m
                        else:
                            b = m - 1
                    n = a - r + 1
                if out and last_part == i and out[-1][2:] == (0, row_elems) \
                        and out[-1][0] + out[-1][1] == r:
                    out[-1] = (out[-1][0], out[-1][1] + n, 0, row_elems)
                else:
                    out.append((r, n, 0, row_elems))
                last_part = i
                r += n
                continue
            e = 0  # the row crosses parts: one run per part it touches
            while e < row_elems:
                b = self.addr + int((elem_off + r * row_stride + e) * isz)
                j = self.part_of(b)
                n = min(row_elems - e, int((self.parts[j][1] - b) // isz))
                out.append((r, 1, e, n))
                e += n
            last_part = -1
            r += 1
        return out

    def _row_end(self, elem_off: int, r: int, row_stride: int, row_elems: int,
                 isz: float) -> int:
        """The address past the last byte of row `r` of a strided access (`runs`)."""
        return self.addr + int(math.ceil((elem_off + r * row_stride + row_elems) * isz))

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
    #: spread over cubes: (byte offset in the tensor, bytes, physical address) per part
    parts: tuple[tuple[int, int, int], ...] = ()

    def placement(self, shape=None, strides=None) -> Placement:
        """The placement of this storage (its own shape unless given)."""
        shape = tuple(self.shape if shape is None else shape)
        base = self.addrs[0]
        return Placement(self.key, base, shape,
                         tuple(strides) if strides is not None else contiguous_strides(shape),
                         self.dtype, self.addrs if len(self.addrs) > 1 and not self.parts
                         else (), tuple((base + o, base + o + nb, a) for o, nb, a in self.parts))

    def spans(self) -> list[tuple[int, int]]:
        """Physical (first byte, end) of every copy or part."""
        if self.parts:
            return [(a, a + nb) for _, nb, a in self.parts]
        return [(a, a + self.nbytes) for a in self.addrs]


class MemoryPlan:
    """Addresses per cube. `replicate_constants`: every constant is copied into every
    cube (the layout a model gets when its constants fit each cube:
    compiler.weights_fit); False: a constant above `SMALL_CONSTANT_BYTES` is placed once,
    in the cubes its reader names (`constant`'s `home`) or the one with the most free
    bytes, and PEs of other cubes read it over the links."""

    def __init__(self, n_cubes: int, cube_bytes: int, replicate_constants: bool = True) -> None:
        self.n_cubes = n_cubes
        self.cube_bytes = cube_bytes
        self.replicate_constants = replicate_constants
        #: bytes of every cube that constants placed once leave free (`room`)
        self.reserve = 0
        self._next = [c * cube_bytes for c in range(n_cubes)]
        self.allocations: dict[str, Allocation] = {}
        self.placements: dict[str, Placement] = {}
        self.scales: dict[str, float] = {}  # storage key → scale of a quantized activation
        # HBM reuse by liveness: storage key → last layer position a tensor in it is read
        self._busy_until: dict[str, int] = {}

    def _bump(self, cube: int, nbytes: int, key: str) -> int:
        a = self._next[cube]
        self._next[cube] = a + -(-max(nbytes, 1) // ALIGN) * ALIGN
        if self._next[cube] > (cube + 1) * self.cube_bytes:
            raise HbmFullError(f"model does not fit in cube {cube}'s HBM ({self.cube_bytes} "
                               f"B): tensor '{key}' of {nbytes} B would end at byte "
                               f"{self._next[cube] - cube * self.cube_bytes}")
        return a

    def allocate(self, key: str, shape, dtype: str, role: str, *, replicate: bool = False,
                 source: str | None = None, data: np.ndarray | None = None,
                 spread: bool = False, live: tuple[int, int] | None = None,
                 cube: int = 0, cuts: Sequence[tuple[int, int]] = ()) -> Allocation:
        """One storage: in cube `cube` (0 unless a lowering wants it beside the PEs that
        use it), copied into every cube (`replicate`), or its rows spread over the cubes
        (`spread`, when there are enough rows: `spread_rows`), or cut at given bytes into
        parts in given cubes (`cuts`: (end byte, cube) of each part in order; a tensor
        whose readers work in different cubes, such as a decode step's query row whose
        heads are attended in the cubes of their keys).

        `live` = (first, last) layer positions (compiler.liveness): an unspread tensor may
        take the space of an earlier unspread storage whose tensors are all dead before
        `first`. It then gets that storage's key (the returned Allocation is a view, not a
        new entry): the schedule orders HBM accesses per storage key by byte overlap, so
        the reuse gets its WAR/WAW edges with no change there."""
        if key in self.allocations:
            return self.allocations[key]
        nb = nbytes_of(shape, dtype)
        parts: tuple[tuple[int, int, int], ...] = ()
        if cuts:
            ends = [0, *(e for e, _ in cuts)]
            assert ends[-1] == nb and all(a < b for a, b in zip(ends, ends[1:], strict=False))
            parts = tuple((a, b - a, self._bump(c, b - a, key))
                          for a, b, (_, c) in zip(ends, ends[1:], cuts, strict=False))
            addrs = (parts[0][2],)
            live = None
        elif spread and self.spread_rows(shape, dtype):
            parts = self._spread(shape, dtype, key)
            addrs = (parts[0][2],)
            live = None  # spread storage neither gives nor takes space
        elif live is not None and not replicate and cube == 0:
            for rkey, until in self._busy_until.items():  # insertion order: deterministic
                r = self.allocations[rkey]
                if until < live[0] and r.nbytes >= nb and len(r.addrs) == 1 and not r.parts:
                    self._busy_until[rkey] = live[1]
                    return Allocation(rkey, role, dtype, tuple(shape), nb, r.addrs, source)
        if not parts:
            cubes = range(self.n_cubes) if replicate else (cube,)
            addrs = tuple(self._bump(c, nb, key) for c in cubes)
        a = Allocation(key, role, dtype, tuple(shape), nb, addrs, source, data, parts)
        self.allocations[key] = a
        if live is not None and not replicate:
            self._busy_until[key] = live[1]
        return a

    def free_bytes(self, cube: int) -> int:
        """Bytes of `cube`'s HBM above the highest address placed in it."""
        return (cube + 1) * self.cube_bytes - self._next[cube]

    def room(self, cube: int) -> int:
        """What a constant placed once may take of `cube`'s free bytes: all but the
        `reserve` kept for what the lowering allocates after it (scratch, quantized
        activations)."""
        return self.free_bytes(cube) - self.reserve

    def emptiest_cube(self) -> int:
        """The cube with the most free HBM (the lowest index among equals)."""
        free = [self.free_bytes(c) for c in range(self.n_cubes)]
        return free.index(max(free))

    def spread_rows(self, shape, dtype: str = "int8") -> bool:
        """Are there enough rows (all axes but the last) and bytes to give every cube a
        part worth having?"""
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        return self.n_cubes > 1 and rows >= self.n_cubes * MIN_ROWS_PER_CUBE \
            and nbytes_of(shape, dtype) >= self.n_cubes * MIN_PART_BYTES

    def _spread(self, shape, dtype: str, key: str) -> tuple[tuple[int, int, int], ...]:
        rows, cols = int(np.prod(shape[:-1])), int(shape[-1])
        per = -(-rows // self.n_cubes)
        parts = []
        for c in range(self.n_cubes):
            r0 = c * per
            r = min(per, rows - r0)
            if r <= 0:
                break
            off = nbytes_of((r0, cols), dtype) if r0 else 0
            nb = nbytes_of((r, cols), dtype)
            parts.append((off, nb, self._bump(c, nb, key)))
        return tuple(parts)

    def place(self, tid: str, alloc: Allocation, shape=None, strides=None) -> Placement:
        p = alloc.placement(shape, strides)
        self.placements[tid] = p
        return p

    def constant(self, key: str, array: np.ndarray, dtype: str, role: str = "weight",
                 source: str | None = None, shape: tuple[int, ...] | None = None,
                 home: Sequence[tuple[int, int]] = ()) -> Placement:
        """A constant (weights, scale vectors, biases): replicated, or placed once
        (`replicate_constants` False, above `SMALL_CONSTANT_BYTES`): cut into parts in the
        cubes `home` names ((end byte, cube) of each part, as `allocate`'s `cuts`), or
        whole in the emptiest cube. `shape` is the logical shape when `array` is a packed
        encoding of it (int4: two values per byte)."""
        shape = tuple(array.shape if shape is None else shape)
        once = not self.replicate_constants and self.n_cubes > 1 \
            and nbytes_of(shape, dtype) > SMALL_CONSTANT_BYTES
        if once and len(home) == 1:
            a = self.allocate(key, shape, dtype, role, source=source, data=array,
                              cube=home[0][1])
        else:
            a = self.allocate(key, shape, dtype, role, replicate=not once, source=source,
                              data=array, cube=self.emptiest_cube() if once else 0,
                              cuts=home if once else ())
        if a.data is not None and a.dtype in PACKED_BYTES \
                and np.asarray(a.data).nbytes != a.nbytes:
            raise ValueError(f"{key}: {np.asarray(a.data).nbytes} packed bytes for a "
                             f"{a.nbytes}-byte {a.dtype} allocation")
        return a.placement(shape)

    def copy(self) -> MemoryPlan:
        """A plan a lowering may change (it places constants, drops the placements of
        tensors it never stores) without changing this one; constant data is shared."""
        c = copy.copy(self)
        c._next = list(self._next)
        c.allocations, c.placements = dict(self.allocations), dict(self.placements)
        c.scales, c._busy_until = dict(self.scales), dict(self._busy_until)
        return c

    def verify(self) -> None:
        spans = []
        for a in self.allocations.values():
            for lo, hi in a.spans():
                spans.append((lo, hi, a.key))
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
            if a.parts:
                out[key]["parts"] = [[o, nb, addr] for o, nb, addr in a.parts]
        return {"version": "1.0", "tensors": out,
                "views": {tid: dict({"storage": p.key, "address": p.addr, "shape": list(p.shape),
                                     "strides": list(p.strides), "dtype": p.dtype},
                                    **({"scale": self.scales[p.key]} if p.key in self.scales
                                       else {}),
                                    **({"parts": [list(t) for t in p.parts]} if p.parts
                                       else {}))
                          for tid, p in sorted(self.placements.items())}}
