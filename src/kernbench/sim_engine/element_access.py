"""Element-address memory access of the data pass: gather (tl.load) and scatter
(tl.store) on a MemoryStore, with bounds, alignment and written-byte checks."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kernbench.errors import AddressError
from kernbench.numerics.dtypes import DTypeSpec, np_dtype
from kernbench.sim_engine.memory_store import PAGE, PAGE_BITS, MemoryStore


def gather(store: MemoryStore, space: str, addrs: npt.ArrayLike, dtype: DTypeSpec, mask: npt.ArrayLike | None = None,
           other: float = 0) -> np.ndarray:  # fmt: skip
    """Element-address gather (tl.load semantics): masked-off lanes take `other`."""
    addrs = np.asarray(addrs, np.int64)
    dt = np_dtype(dtype)
    isz = dt.itemsize
    out = np.empty(addrs.shape, dt)
    m = np.ones(addrs.shape, bool) if mask is None else np.broadcast_to(
        np.asarray(mask, bool), addrs.shape)
    out[...] = np.broadcast_to(np.asarray(other).astype(dt) if np.asarray(other).dtype != dt
                               else np.asarray(other), addrs.shape)
    on = addrs[m]
    if on.size:
        lo, hi = int(on.min()), int(on.max()) + isz
        if lo % isz:
            raise AddressError(f"gather at {space}:{lo:#x} is not aligned to its "
                               f"{isz}-byte elements")
        # one read of the bounding range (bounds-checked), then index it
        win = store.read(space, lo, ((hi - lo) // isz,), dt, zeros_ok=True)
        _check_written(store, space, on, isz)
        vals = win[(on - lo) // isz]
        out[m] = vals
    return out


def scatter(store: MemoryStore, space: str, addrs: npt.ArrayLike, vals: npt.ArrayLike, dtype: DTypeSpec) -> None:
    """Element-address scatter (tl.store semantics); runs of consecutive addresses are
    written as one block. Later lanes win on duplicate addresses."""
    addrs = np.asarray(addrs, np.int64).reshape(-1)
    vals = np.asarray(vals).astype(np_dtype(dtype)).reshape(-1)
    if addrs.size == 0:
        return
    isz = np_dtype(dtype).itemsize
    order = np.argsort(addrs, kind="stable")
    addrs = addrs[order]
    vals = vals[order]
    if addrs.size > 1:
        last = np.append(addrs[1:] != addrs[:-1], True)  # keep the last lane per address
        addrs, vals = addrs[last], vals[last]
    brk = np.nonzero(np.diff(addrs) != isz)[0] + 1
    starts = np.concatenate([[0], brk]).tolist()
    ends = np.concatenate([brk, [addrs.size]]).tolist()
    for s, e in zip(starts, ends, strict=True):
        store.write(space, int(addrs[s]), np.ascontiguousarray(vals[s:e]))


def _check_written(store: MemoryStore, space: str, addrs: np.ndarray, isz: int) -> None:
    """Every gathered element must have been written (uninitialised reads are errors)."""
    lo, hi = int(addrs.min()), int(addrs.max()) + isz
    raw = store.read_bytes(space, lo, hi - lo, zeros_ok=True)  # bounds check
    del raw
    s = store._space(space)
    for p in range(lo >> PAGE_BITS, ((hi - 1) >> PAGE_BITS) + 1):
        if p not in s.masks:
            sel = addrs[(addrs >> PAGE_BITS) == p]
            if sel.size:
                store._uninit(s, int(sel.min()), lo, hi - lo)
            continue
        sel = addrs[(addrs >> PAGE_BITS) == p]
        if not sel.size:
            continue
        off = sel & (PAGE - 1)
        m = s.masks[p]
        ok = m[np.minimum(off + isz - 1, PAGE - 1)] & m[off]
        if not ok.all():
            store._uninit(s, int(sel[~ok][0]), lo, hi - lo)
