"""DataExecutor: pass 2, the op log executed on a MemoryStore with numpy.

Ordering rule (time-faithful): an op reads its inputs at its t_start and its writes
become visible at its t_end, before any op that starts at or after that t_end. So a
schedule race in pass 1 (a consumer that started before its producer ended) is
observable as wrong data in pass 2, not silently repaired. This refines D6: D6 orders by
dependencies; the pass-1 timing is itself the dependency order (a correct schedule
always starts a consumer after its producer's t_end), and explicit `dependency_ids` are
honoured on top: an op whose dependency has not been executed / committed forces it
first (counted in `forced`).

Ops with the same t_start read the same memory state. Among them, read/write address
ranges decide which are independent (no RAW / WAR / WAW overlap, no explicit
dependency): independent alike GEMMs (same shapes, dtypes, flags) run as one batched
np.matmul; the results are identical to running them one by one. A zero-duration op
(t_end == t_start) commits right after it runs, so a later same-time op that depends on
it through memory sees its writes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from kernbench.errors import AddressError, SimulationError
from kernbench.numerics import quant as qmath
from kernbench.numerics.dtypes import PACKED, bits, canon, nbytes_of, np_dtype
from kernbench.sim_engine.block_dma import unpack, unpack_ranges
from kernbench.sim_engine.element_access import gather, scatter
from kernbench.sim_engine.math_ops import MATH_OPS, widen
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLog, OpRecord

Range = tuple[str, int, int]  # space, start, end (bytes, end exclusive)
Write = tuple[str, int, Any, Any]  # space, addr, array (or uint8 bytes), dtype | None


class DataError(SimulationError):
    """An op of the log cannot be executed (bad params, unknown op)."""


# ---------------------------------------------------------------------- ranges
def _tspace(p: dict[str, Any]) -> str:
    return p.get("space") or p.get("addr_space") or "tcm"


def _gather_range(space: str, addrs: npt.ArrayLike, mask: npt.ArrayLike | None, itemsize: int) -> list[Range]:
    a = np.asarray(addrs, np.int64)
    if mask is not None:
        a = a[np.broadcast_to(np.asarray(mask, bool), a.shape)]
    if a.size == 0:
        return []
    return [(space, int(a.min()), int(a.max()) + itemsize)]


def op_ranges(rec: OpRecord) -> tuple[list[Range], list[Range]]:
    """(reads, writes) byte ranges of a record (gathers: the bounding range)."""
    p = rec.params
    k = rec.op_kind
    if k == "memory":
        name = rec.op_name
        if name in ("dma", "dma_read", "dma_write"):
            n = int(p["nbytes"])
            rows = int(p.get("rows", 1) or 1)
            if rows > 1:
                rb = int(p["row_bytes"])
                ss, ds = int(p.get("src_stride", rb)), int(p.get("dst_stride", rb))
                src = (p["src_space"], int(p["src_addr"]), int(p["src_addr"]) + ss * (rows - 1)
                       + rb)
                dst = (p["dst_space"], int(p["dst_addr"]), int(p["dst_addr"]) + ds * (rows - 1)
                       + rb)
                return [src], [dst]
            return ([(p["src_space"], int(p["src_addr"]), int(p["src_addr"]) + n)],
                    [(p["dst_space"], int(p["dst_addr"]), int(p["dst_addr"]) + n)])
        if name == "dma_unpack":  # block-float rows in, bf16 rows out (block_dma)
            return unpack_ranges(p)
        if name == "mcast":
            a, n = int(p["dst_addr"]), int(p["nbytes"])
            return ([(p["src_space"], int(p["src_addr"]), int(p["src_addr"]) + n)],
                    [(sp, a, a + n) for sp in p["dst_spaces"]])
        if name == "gather":
            dt = np_dtype(p["dtype"])
            nb = nbytes_of(tuple(p["shape"]), p["dtype"])
            return (_gather_range(p["src_space"], p["addrs"], p.get("mask"), dt.itemsize),
                    [(p["dst_space"], int(p["dst_addr"]), int(p["dst_addr"]) + nb)])
        if name == "scatter":
            dt = np_dtype(p["dtype"])
            nb = nbytes_of(tuple(p["shape"]), p["dtype"])
            reads = [] if p.get("src_addr") is None else [
                (p["src_space"], int(p["src_addr"]), int(p["src_addr"]) + nb)]
            return reads, _gather_range(p["dst_space"], p["addrs"], p.get("mask"),
                                        dt.itemsize)
        raise DataError(f"unknown memory op {name!r} ({rec.component_id})")
    space = _tspace(p)
    if k == "gemm":
        ta = p.get("dtype_a", p.get("dtype_in"))
        tb = p.get("dtype_b", p.get("dtype_in"))
        reads = [
            (space, int(p["src_a_addr"]), int(p["src_a_addr"]) + nbytes_of(p["shape_a"], ta)),
            (space, int(p["src_b_addr"]), int(p["src_b_addr"]) + nbytes_of(p["shape_b"], tb)),
        ]
        out = nbytes_of(p["shape_out"], p["dtype_out"])
        if p.get("accumulate"):
            reads.append((space, int(p["dst_addr"]), int(p["dst_addr"]) + out))
        if p.get("acc_addr") is not None:
            reads.append((space, int(p["acc_addr"]), int(p["acc_addr"]) + nbytes_of(
                p["shape_out"], p.get("dtype_c", p["dtype_out"]))))
        if p.get("bias_addr") is not None:
            n = p["shape_out"][-1]
            bdt = p.get("dtype_bias", p.get("dtype_acc", "float32"))
            reads.append((space, int(p["bias_addr"]), int(p["bias_addr"]) + nbytes_of((n,), bdt)))
        return reads, [(space, int(p["dst_addr"]), int(p["dst_addr"]) + out)]
    if k == "math":
        reads = []
        spaces = p.get("input_spaces") or [space] * len(p.get("input_addrs", ()))
        for a, shp, dt, sp in zip(p.get("input_addrs", ()), p.get("input_shapes", ()),
                                  p.get("input_dtypes", ()), spaces, strict=False):
            if a is not None:
                reads.append((sp, int(a), int(a) + nbytes_of(tuple(shp), dt)))
        return reads, [(space, int(a), int(a) + nbytes_of(tuple(shp), dt))
                       for a, shp, dt in _destinations(p)]
    raise DataError(f"unknown op_kind {k!r} ({rec.component_id})")


def _overlap(xs: Iterable[Range], ys: Iterable[Range]) -> bool:
    for s1, a1, b1 in xs:
        for s2, a2, b2 in ys:
            if s1 == s2 and a1 < b2 and a2 < b1:
                return True
    return False


class _RangeSet:
    """Byte ranges per space with a bounding box per space (fast disjointness test)."""

    __slots__ = ("by_space",)

    def __init__(self) -> None:
        self.by_space: dict[str, tuple[int, int, list[tuple[int, int]]]] = {}

    def add(self, ranges: list[Range]) -> None:
        for sp, a, b in ranges:
            hit = self.by_space.get(sp)
            if hit is None:
                self.by_space[sp] = (a, b, [(a, b)])
            else:
                lo, hi, lst = hit
                lst.append((a, b))
                self.by_space[sp] = (min(lo, a), max(hi, b), lst)

    def hits(self, ranges: list[Range]) -> bool:
        for sp, a, b in ranges:
            hit = self.by_space.get(sp)
            if hit is None or b <= hit[0] or hit[1] <= a:
                continue
            for x, y in hit[2]:
                if a < y and x < b:
                    return True
        return False


# ---------------------------------------------------------------------- executor
class DataExecutor:
    """Run an op log on a store (normally a snapshot of the pass-1 initial state)."""

    def __init__(self, op_log: OpLog | list[OpRecord], store: MemoryStore, *, batch: bool = True,
                 on_commit: Callable[[int, MemoryStore], None] | None = None) -> None:
        """`on_commit(idx, store)`, when given, is called at every op boundary: right after
        record `idx`'s writes land in `store` (the verification's debug mode reads the
        intermediate tensors there)."""
        recs = op_log.records if hasattr(op_log, "records") else list(op_log)
        self.records: list[OpRecord] = recs
        self.store = store
        self.batch = batch
        self.on_commit = on_commit
        self.executed = 0
        self.batched = 0  # GEMMs that ran inside a batch of two or more
        self.forced = 0  # explicit dependencies that had to be committed early

    def run(self) -> MemoryStore:
        recs = self.records
        order = sorted(range(len(recs)), key=lambda i: recs[i].t_start)
        self._done: dict[int, list[Write] | None] = {}  # idx -> pending writes (None: committed)
        self._heap: list[tuple[float, int]] = []
        i = 0
        n = len(order)
        while i < n:
            t = recs[order[i]].t_start
            j = i
            while j < n and recs[order[j]].t_start == t:
                j += 1
            self._commit_until(t)
            self._group([order[x] for x in range(i, j)], t)
            i = j
        self._commit_until(float("inf"))
        return self.store

    # -------------------------------------------------------------- commits
    def _commit_until(self, t: float) -> None:
        h = self._heap
        while h and h[0][0] <= t:
            _, idx = heapq.heappop(h)
            self._commit(idx)

    def _commit(self, idx: int) -> None:
        writes = self._done.get(idx)
        if not writes:
            self._done[idx] = None
            if self.on_commit is not None:
                self.on_commit(idx, self.store)
            return
        st = self.store
        for space, addr, arr, dt in writes:
            if dt == "bytes":
                st.write_bytes(space, addr, arr)
            elif dt == "scatter":
                self._scatter_commit(space, arr)
            else:
                st.write(space, addr, arr, dt)
        self._done[idx] = None
        if self.on_commit is not None:
            self.on_commit(idx, st)

    def _scatter_commit(self, space: str, payload: tuple) -> None:
        addrs, vals, dtype = payload
        scatter(self.store, space, addrs, vals, dtype)

    # -------------------------------------------------------------- groups
    def _group(self, idxs: list[int], t: float) -> None:
        recs = self.records
        if len(idxs) == 1 or not self.batch:
            for idx in idxs:
                self._exec_one(idx, t)
            return
        cur: list[int] = []
        cur_r = _RangeSet()
        cur_w = _RangeSet()
        for idx in idxs:
            rec = recs[idx]
            r, w = op_ranges(rec)
            dep = any(d in cur for d in rec.dependency_ids)
            if cur and (dep or cur_w.hits(r) or cur_r.hits(w) or cur_w.hits(w)):
                self._exec_set(cur, t)
                cur, cur_r, cur_w = [], _RangeSet(), _RangeSet()
            cur.append(idx)
            cur_r.add(r)
            cur_w.add(w)
        if cur:
            self._exec_set(cur, t)

    def _exec_set(self, idxs: list[int], t: float) -> None:
        """Independent ops of one time: alike GEMMs batched, the rest one by one."""
        recs = self.records
        classes: dict[tuple, list[int]] = {}
        rest: list[int] = []
        for idx in idxs:
            rec = recs[idx]
            if rec.op_kind == "gemm":
                classes.setdefault(_gemm_key(rec.params), []).append(idx)
            else:
                rest.append(idx)
        for members in classes.values():
            if len(members) == 1:
                rest.append(members[0])
                continue
            for idx in members:
                self._deps(idx, t)
            outs = self._gemm_batch([recs[i].params for i in members])
            self.batched += len(members)
            for idx, w in zip(members, outs, strict=True):
                self._finish(idx, [w], t)
        for idx in sorted(rest, key=idxs.index):
            self._exec_one(idx, t)

    def _deps(self, idx: int, t: float) -> None:
        for d in self.records[idx].dependency_ids:
            if d not in self._done:
                self.forced += 1
                self._exec_one(d, self.records[d].t_start)
            if self._done.get(d) is not None:
                self.forced += 1
                self._commit(d)

    def _exec_one(self, idx: int, t: float) -> None:
        if idx in self._done:
            return
        self._deps(idx, t)
        rec = self.records[idx]
        try:
            if rec.op_kind == "memory":
                writes = self._memory(rec)
            elif rec.op_kind == "gemm":
                writes = [self._gemm_batch([rec.params])[0]]
            elif rec.op_kind == "math":
                writes = self._math(rec)
            else:
                raise DataError(f"unknown op_kind {rec.op_kind!r}")
        except AddressError as e:
            e.op_index = idx  # type: ignore[attr-defined]  # the host names the entry behind it
            raise
        except (KeyError, ValueError, TypeError) as e:
            raise DataError(
                f"op #{idx} {rec.op_kind}/{rec.op_name} on {rec.component_id} at "
                f"t={rec.t_start:g} ns: {type(e).__name__}: {e}"
            ) from e
        self._finish(idx, writes, t)

    def _finish(self, idx: int, writes: list[Write], t: float) -> None:
        rec = self.records[idx]
        self.executed += 1
        self._done[idx] = writes
        t_end = rec.t_end if rec.t_end == rec.t_end else rec.t_start  # NaN: never ended
        if t_end <= t:
            self._commit(idx)
        else:
            heapq.heappush(self._heap, (t_end, idx))

    # -------------------------------------------------------------- memory
    def _memory(self, rec: OpRecord) -> list[Write]:
        p = rec.params
        st = self.store
        name = rec.op_name
        if name in ("dma", "dma_read", "dma_write"):
            rows = int(p.get("rows", 1) or 1)
            if rows <= 1:
                data = st.read_bytes(p["src_space"], int(p["src_addr"]), int(p["nbytes"]))
                return [(p["dst_space"], int(p["dst_addr"]), data, "bytes")]
            rb = int(p["row_bytes"])
            ss, ds = int(p.get("src_stride", rb)), int(p.get("dst_stride", rb))
            out: list[Write] = []
            for r in range(rows):
                data = st.read_bytes(p["src_space"], int(p["src_addr"]) + r * ss, rb)
                out.append((p["dst_space"], int(p["dst_addr"]) + r * ds, data, "bytes"))
            return out
        if name == "dma_unpack":
            return [unpack(st, p)]
        if name == "mcast":  # one read, the same bytes into every destination
            data = st.read_bytes(p["src_space"], int(p["src_addr"]), int(p["nbytes"]))
            return [(sp, int(p["dst_addr"]), data, "bytes") for sp in p["dst_spaces"]]
        if name == "gather":
            vals = gather(st, p["src_space"], p["addrs"], p["dtype"], p.get("mask"),
                          p.get("other", 0))
            return [(p["dst_space"], int(p["dst_addr"]),
                     vals.reshape(tuple(p["shape"])), _store_dt(p["dtype"]))]
        if name == "scatter":
            shape = tuple(p["shape"])
            if p.get("src_addr") is not None:
                vals = st.read(p["src_space"], int(p["src_addr"]), shape, p["dtype"])
            else:
                vals = np.broadcast_to(np.asarray(p["values"]), shape).astype(np_dtype(p["dtype"]))
            addrs = np.broadcast_to(np.asarray(p["addrs"], np.int64), shape)
            if p.get("mask") is not None:
                m = np.broadcast_to(np.asarray(p["mask"], bool), shape)
                addrs, vals = addrs[m], vals[m]
            return [(p["dst_space"], 0, (addrs.reshape(-1), np.asarray(vals).reshape(-1),
                                         p["dtype"]), "scatter")]
        raise DataError(f"unknown memory op {name!r}")

    # -------------------------------------------------------------- gemm
    def _gemm_batch(self, ps: list[dict[str, Any]]) -> list[Write]:
        p0 = ps[0]
        st = self.store
        space = _tspace(p0)
        ta = canon(p0.get("dtype_a", p0.get("dtype_in", "float32")))
        tb = canon(p0.get("dtype_b", p0.get("dtype_in", "float32")))
        acc_t = canon(p0.get("dtype_acc", "float32"))
        out_t = canon(p0.get("dtype_out", acc_t))
        a = np.stack([st.read(_tspace(p), int(p["src_a_addr"]), tuple(p["shape_a"]), ta)
                      for p in ps])
        b = np.stack([st.read(_tspace(p), int(p["src_b_addr"]), tuple(p["shape_b"]), tb)
                      for p in ps])
        if p0.get("transpose_a"):
            a = np.swapaxes(a, -1, -2)
        if p0.get("transpose_b"):
            b = np.swapaxes(b, -1, -2)
        integer = np_dtype(ta).kind in "iu" and np_dtype(tb).kind in "iu"
        if integer:
            y = qmath.int_matmul(a, b, p0.get("zero_point_a", 0), p0.get("zero_point_b", 0))
            y = y.astype(np.int64) if np_dtype(acc_t).kind in "iu" else y.astype(np.float32)
        else:
            y = np.matmul(widen(a).astype(np.float32), widen(b).astype(np.float32))
        outs: list[Write] = []
        shape_out = tuple(p0["shape_out"])
        for i, p in enumerate(ps):
            yi = y[i]
            if p.get("accumulate") or p.get("acc_addr") is not None:
                src = p.get("acc_addr")
                prev = st.read(_tspace(p), int(p["dst_addr"] if src is None else src), shape_out,
                               canon(p.get("dtype_c", out_t)))
                yi = (yi + (prev.astype(np.int64) if integer and np_dtype(acc_t).kind in "iu"
                            else widen(prev).astype(np.float32)))
            if p.get("bias_addr") is not None:
                bdt = p.get("dtype_bias", acc_t)
                bias = st.read(_tspace(p), int(p["bias_addr"]), (shape_out[-1],), bdt)
                yi = yi + (bias.astype(np.int64) if yi.dtype.kind in "iu" else
                           widen(bias).astype(np.float32))
            if acc_t == "int32" and yi.dtype == np.int64:
                yi = yi.astype(np.int32)  # the tile's int32 accumulator
            if yi.shape != shape_out:
                raise DataError(f"gemm result {yi.shape} != shape_out {shape_out}")
            outs.append((space if p is p0 else _tspace(p), int(p["dst_addr"]),
                         _to(yi, out_t), _store_dt(out_t)))
        return outs

    # -------------------------------------------------------------- math
    def _math(self, rec: OpRecord) -> list[Write]:
        p = rec.params
        op = p.get("op", rec.op_name)
        fn = MATH_OPS.get(op)
        if fn is None:
            raise DataError(f"unknown math op {op!r} (known: {', '.join(sorted(MATH_OPS))})")
        space = _tspace(p)
        addrs = p.get("input_addrs", ())
        imms = p.get("imm") or [None] * len(addrs)
        spaces = p.get("input_spaces") or [space] * len(addrs)
        ins = []
        for a, shp, dt, imm, sp in zip(addrs, p.get("input_shapes", [None] * len(addrs)),
                                       p.get("input_dtypes", [None] * len(addrs)), imms,
                                       spaces, strict=False):
            if a is None:
                v = np.asarray(imm)
                if dt is not None:
                    v = v.astype(np_dtype(dt))
                ins.append(v)
            else:
                ins.append(self.store.read(sp, int(a), tuple(shp), dt))
        ins = _dequantized(ins, p.get("in_scales"))
        with np.errstate(all="ignore"):
            y = fn(ins, p)
        dests = _destinations(p)
        ys = y if "dst_addrs" in p else [y]
        if len(ys) != len(dests):
            raise DataError(f"math op {op!r} gave {len(ys)} outputs for {len(dests)} "
                            "destinations")
        out: list[Write] = []
        for yk, (addr, shp, dt) in zip(ys, dests, strict=True):
            out_t = canon(dt)
            shape = tuple(shp)
            yk = np.asarray(yk)
            if yk.shape != shape:
                if yk.size == int(np.prod(shape, dtype=np.int64)):
                    yk = yk.reshape(shape)
                else:
                    yk = np.broadcast_to(yk, shape)
            if p.get("out_scale") is not None and np_dtype(out_t).kind in "iu":
                yk = qmath.quantize(yk, np.float32(p["out_scale"]), 0, bits(out_t),
                                    np_dtype(out_t).kind == "i")
            out.append((space, int(addr), _to(yk, out_t), _store_dt(out_t)))
        return out


def _destinations(p: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    """(address, shape, dtype) of each output of a math record: `dst_addrs`,
    `shapes_out`, `dtypes_out` for several, else `dst_addr`, `shape_out`, `dtype`."""
    if "dst_addrs" in p:
        return list(zip(p["dst_addrs"], p["shapes_out"], p["dtypes_out"], strict=True))
    return [(p["dst_addr"], p["shape_out"], p["dtype"])]


def _dequantized(ins: list[np.ndarray], scales: list | None) -> list[np.ndarray]:
    """Integer inputs of a math op with a scale (an 8-bit VE operand) as their
    real values q · scale in fp32; the rest as they are."""
    if not scales:
        return ins
    return [x.astype(np.float32) * np.float32(s) if s is not None and x.dtype.kind in "iu"
            else x for x, s in zip(ins, list(scales) + [None] * len(ins), strict=False)]


def _store_dt(dtype: str) -> Any:
    c = canon(dtype)
    return c if c in PACKED else None


def _to(y: np.ndarray, dtype: str) -> np.ndarray:
    c = canon(dtype)
    dt = np_dtype(c)
    if y.dtype == dt:
        return np.ascontiguousarray(y)
    if c in PACKED:
        return y.astype(dt)
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(y.astype(dt))


def _gemm_key(p: dict[str, Any]) -> tuple:
    return (tuple(p["shape_a"]), tuple(p["shape_b"]), tuple(p["shape_out"]),
            p.get("dtype_in"), p.get("dtype_a"), p.get("dtype_b"), p.get("dtype_acc"),
            p.get("dtype_out"), bool(p.get("transpose_a")), bool(p.get("transpose_b")),
            bool(p.get("accumulate")), p.get("bias_addr") is not None,
            p.get("acc_addr") is not None, p.get("dtype_c"),
            p.get("dtype_bias"), str(p.get("zero_point_a", 0)), str(p.get("zero_point_b", 0)))
