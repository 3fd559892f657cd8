"""MemoryStore: the data in HBM, shared SRAM and every PE's TCM.

Spaces: "hbm" (global physical addresses, topology.hbm_bytes), "sram" (shared SRAM,
global SRAM addresses) and one per PE, "tcm:<pe id>" (e.g. "tcm:sip0.cube0.pe0", the
TCM capacity).

Canonical state is byte-addressable: sparse pages of uint8 plus a written-mask, so reading
bytes nobody wrote is an error (unless `zeros_ok=True`, which reads them as 0). On top sits
a tensor-granular cache: `write` keeps a reference to the array it was given, and a `read`
of the same address with the same dtype and shape returns it (read-only) without touching
the pages. Any write that overlaps a cached tensor evicts it. Callers must not mutate an
array after writing it (the ADR's write-by-reference contract); `read` returns a read-only
array when it comes from the cache, a fresh array otherwise.

Contract (D7): addresses are byte addresses, aligned to the element size; a read may
reinterpret bytes written with another dtype as long as the byte counts match; int4 /
uint4 are packed two per byte, low nibble first (qmath.pack_int4), int2 / uint2 four per byte
(qmath.pack_bits), and come back in int8 /
uint8 containers; bf16 and float8_e4m3fn are ml_dtypes arrays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kernbench.errors import AddressError, InputError
from kernbench.numerics import quant as qmath
from kernbench.numerics.dtypes import PACKED, DTypeSpec, bits, canon, nbytes_of, np_dtype
from kernbench.numerics.npz import write_npz
from kernbench.topology.model import Topology

STORE_JSON, STORE_NPZ = "memory_store.json", "memory_store.npz"

PAGE_BITS = 16
PAGE = 1 << PAGE_BITS


class _Space:
    __slots__ = ("name", "size", "pages", "masks", "cache", "cache_pages")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.pages: dict[int, np.ndarray] = {}
        self.masks: dict[int, np.ndarray] = {}
        self.cache: dict[int, tuple[int, np.ndarray]] = {}  # addr -> (nbytes, array)
        self.cache_pages: dict[int, set[int]] = {}  # page -> cached addrs touching it


class MemoryStore:
    """Byte-addressable memories keyed by space name."""

    def __init__(self, spaces: dict[str, int] | None = None) -> None:
        self._spaces: dict[str, _Space] = {}
        for name, size in (spaces or {}).items():
            self.add_space(name, size)
        self.bytes_written = 0
        self.bytes_read = 0

    @classmethod
    def for_topology(cls, topology: Topology) -> MemoryStore:
        """hbm, sram (if any) and one tcm:<pe> space per PE of `topology`."""
        spaces = {"hbm": topology.hbm_bytes}
        if topology.sram_bytes:
            spaces["sram"] = max(c.sram_base + c.sram_bytes for c in topology.cubes)
        tcm = topology.config.cube.pe_template.pe_tcm.capacity_kib * 1024
        for p in topology.pes:
            spaces[f"tcm:{p.id}"] = tcm
        return cls(spaces)

    def add_space(self, name: str, size: int) -> None:
        self._spaces[name] = _Space(name, int(size))

    @property
    def spaces(self) -> dict[str, int]:
        return {n: s.size for n, s in self._spaces.items()}

    def space_size(self, space: str) -> int:
        return self._space(space).size

    # ------------------------------------------------------------------ checks
    def _space(self, space: str) -> _Space:
        s = self._spaces.get(space)
        if s is None:
            known = ", ".join(sorted(self._spaces)[:6])
            raise AddressError(f"memory space '{space}' does not exist (known: {known}, ...)")
        return s

    def _check(self, s: _Space, addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or nbytes < 0 or addr + nbytes > s.size:
            raise AddressError(
                f"{what} of {nbytes} bytes at {s.name}:{addr:#x} is outside the space "
                f"[0, {s.size:#x})"
            )

    @staticmethod
    def _align(s: _Space, addr: int, itemsize: int, what: str) -> None:
        if itemsize > 1 and addr % itemsize:
            raise AddressError(
                f"{what} at {s.name}:{addr:#x} is not aligned to its {itemsize}-byte elements"
            )

    # ------------------------------------------------------------------ bytes
    def write_bytes(self, space: str, addr: int, data: bytes | np.ndarray) -> None:
        s = self._space(space)
        buf = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check(s, addr, buf.size, "write")
        self._evict(s, addr, buf.size, keep=None)
        self._put(s, addr, buf)

    def read_bytes(self, space: str, addr: int, nbytes: int, *, zeros_ok: bool = False
                   ) -> np.ndarray:  # fmt: skip
        s = self._space(space)
        self._check(s, addr, nbytes, "read")
        return self._get(s, addr, nbytes, zeros_ok)

    def _put(self, s: _Space, addr: int, buf: np.ndarray) -> None:
        n = buf.size
        self.bytes_written += n
        pos = 0
        while pos < n:
            a = addr + pos
            p, off = a >> PAGE_BITS, a & (PAGE - 1)
            take = min(PAGE - off, n - pos)
            page = s.pages.get(p)
            if page is None:
                page = s.pages[p] = np.zeros(PAGE, np.uint8)
                s.masks[p] = np.zeros(PAGE, np.bool_)
            page[off:off + take] = buf[pos:pos + take]
            s.masks[p][off:off + take] = True
            pos += take

    def _get(self, s: _Space, addr: int, nbytes: int, zeros_ok: bool) -> np.ndarray:
        self.bytes_read += nbytes
        out = np.zeros(nbytes, np.uint8)
        pos = 0
        while pos < nbytes:
            a = addr + pos
            p, off = a >> PAGE_BITS, a & (PAGE - 1)
            take = min(PAGE - off, nbytes - pos)
            page = s.pages.get(p)
            if page is None:
                if not zeros_ok:
                    self._uninit(s, a, addr, nbytes)
            else:
                if not zeros_ok:
                    m = s.masks[p][off:off + take]
                    if not m.all():
                        self._uninit(s, a + int(np.argmin(m)), addr, nbytes)
                out[pos:pos + take] = page[off:off + take]
            pos += take
        return out

    @staticmethod
    def _uninit(s: _Space, bad: int, addr: int, nbytes: int) -> None:
        raise AddressError(
            f"read of {nbytes} bytes at {s.name}:{addr:#x} touches byte {s.name}:{bad:#x} "
            f"that was never written (uninitialised memory)"
        )

    # ------------------------------------------------------------------ cache
    def _evict(self, s: _Space, addr: int, nbytes: int, keep: int | None) -> None:
        if not s.cache:
            return
        end = addr + nbytes
        for p in range(addr >> PAGE_BITS, ((max(end, addr + 1) - 1) >> PAGE_BITS) + 1):
            addrs = s.cache_pages.get(p)
            if not addrs:
                continue
            for ca in sorted(addrs):
                if ca == keep:
                    continue
                hit = s.cache.get(ca)
                if hit is not None and ca < end and addr < ca + hit[0]:
                    self._drop(s, ca)

    @staticmethod
    def _drop(s: _Space, ca: int) -> None:
        nb, _ = s.cache.pop(ca)
        for p in range(ca >> PAGE_BITS, ((ca + max(nb, 1) - 1) >> PAGE_BITS) + 1):
            addrs = s.cache_pages.get(p)
            if addrs is not None:
                addrs.discard(ca)

    # ------------------------------------------------------------------ tensors
    def write(self, space: str, addr: int, array: npt.ArrayLike, dtype: DTypeSpec | None = None) -> None:
        """Store `array` at `addr` (bytes → pages; the array itself → the tensor cache).

        `dtype` "int4" / "uint4" (or an ml_dtypes int4 array) packs two values per byte."""
        s = self._space(space)
        a = np.asarray(array)
        packed = canon(dtype) if dtype is not None else canon(a.dtype) \
            if a.dtype.name in PACKED else None
        if packed not in PACKED:
            packed = None
            if dtype is not None and np_dtype(dtype) != a.dtype:
                a = a.astype(np_dtype(dtype))
        if packed:
            buf = qmath.pack_bits(a.astype(np.int8 if packed.startswith("int") else np.uint8),
                                  bits(packed))
        else:
            a = np.ascontiguousarray(a)
            self._align(s, addr, a.dtype.itemsize, "write")
            buf = a.reshape(-1).view(np.uint8)
        self._check(s, addr, buf.size, "write")
        self._evict(s, addr, buf.size, keep=addr)
        if s.cache.get(addr, (0,))[0] not in (0, buf.size):
            self._drop(s, addr)
        self._put(s, addr, buf)
        if not packed and buf.size:
            s.cache[addr] = (buf.size, a)
            for p in range(addr >> PAGE_BITS, ((addr + buf.size - 1) >> PAGE_BITS) + 1):
                s.cache_pages.setdefault(p, set()).add(addr)

    def read(self, space: str, addr: int, shape: int | Sequence[int], dtype: DTypeSpec, *, zeros_ok: bool = False
             ) -> np.ndarray:  # fmt: skip
        """The tensor of `shape` and `dtype` at `addr` (reinterpreting the bytes there)."""
        s = self._space(space)
        shape = tuple(int(d) for d in np.atleast_1d(shape)) if not isinstance(shape, tuple) \
            else tuple(int(d) for d in shape)
        c = canon(dtype)
        dt = np_dtype(c)
        nbytes = nbytes_of(shape, c)
        hit = s.cache.get(addr)
        if hit is not None and hit[0] == nbytes and c not in PACKED:
            arr = hit[1]
            if arr.dtype == dt and arr.shape == shape:
                self.bytes_read += nbytes
                v = arr.view()
                v.flags.writeable = False
                return v
        if hit is not None and hit[1].dtype != dt and hit[0] != nbytes:
            raise AddressError(
                f"read at {s.name}:{addr:#x} reinterprets the {hit[1].shape} {hit[1].dtype} "
                f"tensor written there ({hit[0]} bytes) as {shape} {c} ({nbytes} bytes): "
                f"a reinterpreting read must cover the same number of bytes"
            )
        if c not in PACKED:
            self._align(s, addr, dt.itemsize, "read")
        self._check(s, addr, nbytes, "read")
        raw = self._get(s, addr, nbytes, zeros_ok)
        if c in PACKED:
            n = int(np.prod(shape, dtype=np.int64))
            return qmath.unpack_bits(raw, n, bits(c), signed=c.startswith("int")).reshape(shape)
        return raw.view(dt).reshape(shape)

    # ------------------------------------------------------------------ copies
    def snapshot(self) -> MemoryStore:
        """A deep copy (pages and masks; cached tensors are shared, they are never mutated)."""
        new = MemoryStore()
        for name, s in self._spaces.items():
            t = _Space(name, s.size)
            t.pages = {p: a.copy() for p, a in s.pages.items()}
            t.masks = {p: m.copy() for p, m in s.masks.items()}
            t.cache = dict(s.cache)
            t.cache_pages = {p: set(a) for p, a in s.cache_pages.items()}
            new._spaces[name] = t
        return new

    def written_bytes(self, space: str) -> int:
        """How many distinct bytes of `space` have been written."""
        return int(sum(int(m.sum()) for m in self._space(space).masks.values()))

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write the canonical state (pages and written-masks of every space) to folder
        `path` (memory_store.json + a deterministic .npz); `load` restores it."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        spaces = []
        for i, (name, s) in enumerate(self._spaces.items()):
            pages = sorted(s.pages)
            spaces.append({"name": name, "size": s.size, "pages": pages})
            for p in pages:
                arrays[f"s{i}p{p}"] = s.pages[p]
                arrays[f"s{i}m{p}"] = np.packbits(s.masks[p])
        doc = {"format": "kernbench-memory/1", "page_bytes": PAGE, "spaces": spaces}
        (path / STORE_JSON).write_text(json.dumps(doc, separators=(",", ":")),
                                       encoding="utf-8")
        write_npz(path / STORE_NPZ, arrays)

    @classmethod
    def load(cls, path: str | Path) -> MemoryStore:
        path = Path(path)
        try:
            doc = json.loads((path / STORE_JSON).read_text(encoding="utf-8"))
            z = np.load(path / STORE_NPZ, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"not a saved memory store: {e}", file=str(path)) from None
        if doc.get("format") != "kernbench-memory/1" or doc.get("page_bytes") != PAGE:
            raise InputError("not a saved memory store (format or page size)",
                             file=str(path / STORE_JSON))
        new = cls()
        with z:
            for i, sp in enumerate(doc["spaces"]):
                new.add_space(sp["name"], sp["size"])
                s = new._spaces[sp["name"]]
                for p in sp["pages"]:
                    s.pages[p] = z[f"s{i}p{p}"].copy()
                    s.masks[p] = np.unpackbits(z[f"s{i}m{p}"])[:PAGE].astype(np.bool_)
        return new
