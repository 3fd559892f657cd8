"""Schedule pass: the dependencies of every tile op.

As few and as precise as correctness needs: read-after-write on TCM buffers (last
writer), write-after-read / write-after-write on reused TCM space, and on HBM byte ranges
read-after-write (a load waits only for the stores that wrote bytes it reads),
write-after-write and write-after-read. A load of constants, which depends on nothing,
may run ahead of its layer by `PREFETCH_LAYERS` layers of its PE: it waits until the PE
has computed the layer that many layers back, so a GEMM's weights stream in while the
short layers before it (LayerNorm, a residual ADD) run, and its activation load does not
queue behind them on the PE's DMA channel.

The work is done by a `Scheduler` fed ops in program order, the whole program (this pass)
or one IR node's ops at a time (`compiler.stream`); it forgets what no later op can depend
on (its docstring), so its memory follows the live storages, not the program.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.hbm_cover import Access
from kernbench.compiler.region import Region, StorageUse, node_of
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import TileGraph

#: how many of its PE's layers a load of constants may run ahead of (1: only within its
#: own layer, after the previous one has computed)
PREFETCH_LAYERS = 3
#: loads of constants a PE may have in flight: each waits for the PE's load of constants
#: this many back. A PE's DMA read channel serves one transfer at a time, first come first
#: served, and a transfer holds the TCM port while it lands: with every prefetch queued
#: at once, a data load or a vector op on the critical path waits behind all of them
#: (in decode, a LayerNorm's row load behind the next layer's weight loads). One in
#: flight is the fastest depth on the decode step
PREFETCH_DEPTH = 1


def overlaps(a: tuple, b: tuple) -> bool:
    """Do two HBM ranges (lo, hi, stride, row_bytes) of one storage share a byte?"""
    lo1, hi1, st1, rb1 = a
    lo2, hi2, st2, rb2 = b
    if not (lo1 < hi2 and lo2 < hi1):
        return False
    if st1 == st2 and rb1 < st1 and rb2 < st2:
        # same row pitch: overlapping only if the column intervals meet. On a circle of one
        # pitch, range 1's rows start at 0 and range 2's at d; whatever the storage's
        # alignment (a block may straddle a multiple of the pitch), they meet iff range 2
        # starts inside range 1 or range 1 starts inside range 2
        d = (lo2 - lo1) % st1
        return d < rb1 or d + rb2 > st1
    return True


class Classes(dict):
    """An HBM storage's kept accesses by column class (`_column_class`) → accesses, with
    the strided classes indexed by (row stride, row bytes) → their first columns, sorted:
    a storage read or written in many column blocks (a KV cache, one block per head) has
    dozens of classes, of which a range's columns meet a few (`meeting`)."""

    __slots__ = ("_phases",)

    def __init__(self) -> None:
        super().__init__()
        self._phases: dict[int, dict[int, list[int]]] = {}

    def add(self, a: Access) -> None:
        cls = _column_class(a.rng)
        accesses = self.get(cls)
        if accesses is not None:
            accesses.append(a)
            return
        self[cls] = [a]
        if cls is not None:
            insort(self._phases.setdefault(cls[0], {}).setdefault(cls[2], []), cls[1])

    def drop(self, cls: tuple | None) -> None:
        del self[cls]
        if cls is not None:
            by_rb = self._phases[cls[0]]
            phases = by_rb[cls[2]]
            del phases[bisect_left(phases, cls[1])]
            if not phases:
                del by_rb[cls[2]]
                if not by_rb:
                    del self._phases[cls[0]]

    def meeting(self, rng: tuple) -> list:
        """The classes `rng` can share a byte with, hulls aside (`overlaps` without its
        hull test, which decides alike for every range of a class): all but those of
        `rng`'s own pitch whose columns miss its columns on every row."""
        lo, _, st, rb = rng
        if rb >= st:
            return list(self)
        out = [None] if None in self else []
        for cst, by_rb in self._phases.items():
            for crb, phases in by_rb.items():
                # d = (phase - lo) mod st meets iff d < rb or d > st - crb: the phases
                # of the circular window [lo - crb + 1, lo + rb - 1]
                n = rb + crb - 1
                if cst != st or n >= st:
                    out.extend([(cst, p, crb) for p in phases])
                    continue
                a = (lo - crb + 1) % st
                b = a + n
                i = bisect_left(phases, a)
                j = bisect_left(phases, b, i)
                out.extend([(st, p, crb) for p in phases[i:j]])
                if b > st:
                    j = bisect_left(phases, b - st)
                    out.extend([(st, p, crb) for p in phases[:j]])
        return out


def _column_class(rng: tuple) -> tuple | None:
    """A strided range's (row stride, first byte modulo the stride, row bytes): two
    ranges of one class start their rows at the same column, so one test of the columns
    decides `overlaps` for the whole class but for the hulls. None for a dense range
    (row bytes >= stride), whose overlap is its hull's."""
    _, _, st, rb = rng
    return (st, rng[0] % st, rb) if rb < st else None


def _size(table: dict[str, Classes]) -> int:
    return sum(len(a) for classes in table.values() for a in classes.values())


class Scheduler:
    """The schedule pass's state, fed ops in program order (`feed`): the whole program at
    once (the `Schedule` pass) or one layer at a time (`compiler.stream`).

    What it keeps is bounded by what later ops can still depend on, not by the program:
    - a TCM buffer's writer and readers are dropped when an op frees it, and the ops that
      touched it when the allocator no longer offers its space for reuse (`forget`);
    - reads of a storage no op writes (weights, constants) are not kept;
    - an HBM access is dropped once later writes cover all its bytes (`hbm_cover`): each
      waited for it, so whoever overlaps it waits for them (the emitted dependencies are
      the same up to ones implied by others: the same order, the same timing);
    - a storage's accesses are dropped after the last IR node whose ops touch it
      (`StorageUse`, gathered from the ops beforehand)."""

    def __init__(self, use: StorageUse | None = None) -> None:
        # PE → [(layer, its latest compute op)] of the PE's latest layers, newest last:
        # bounds how far ahead loads of constants may run
        self.last_compute: dict[int, list[tuple[str, int]]] = {}
        # PE → (layer, index) of its latest load that waits for data (not a constant)
        self.last_data_load: dict[int, tuple[str, int]] = {}
        # PE → its latest loads of constants (prefetches), newest last
        self.prefetches: dict[int, list[int]] = {}
        self.last_writer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        self.accessed: dict[int, list[int]] = {}
        # storage key → its kept accesses by column class (`_column_class`)
        self.hbm_writes: dict[str, Classes] = {}
        self.hbm_reads: dict[str, Classes] = {}
        self.use = use
        self._node = -1               # the IR node whose ops are being scheduled
        self._stream: int | None = None  # the stream of the op fed last
        self._by_last: dict[int, list[str]] = {}
        for key, last in (use.last.items() if use else ()):
            self._by_last.setdefault(last, []).append(key)
        self.dropped: set[str] = set()

    def kept(self) -> tuple[int, int]:
        """What the scheduler remembers (what its memory follows): (HBM accesses, TCM
        buffer users and writers)."""
        hbm = _size(self.hbm_writes) + _size(self.hbm_reads)
        tcm = (sum(map(len, self.accessed.values())) + sum(map(len, self.readers.values()))
               + len(self.last_writer))
        return hbm, tcm

    def forget(self, bufs: list) -> None:  # noqa: ANN001 - tilegraph.Buf
        """TCM buffers no later buffer will reuse (the allocator retired them)."""
        for b in bufs:
            self.accessed.pop(b.id, None)

    def _enter(self, stream: int) -> None:
        """Ops of a later IR node begin: storages no op from here on touches go."""
        if stream == self._stream:
            return
        self._stream = stream
        node = node_of(self.use.node_streams, stream)
        while self._node < node:
            for key in self._by_last.pop(self._node, ()):
                self.hbm_writes.pop(key, None)
                self.hbm_reads.pop(key, None)
                self.dropped.add(key)
            self._node += 1

    def feed(self, ops: list) -> None:  # noqa: ANN001 - tilegraph.TileOp
        """Set `deps` of `ops` (placed, allocated, in program order, after every op fed
        before)."""
        use = self.use
        for op in ops:
            if use is not None and op.stream != self._stream:
                self._enter(op.stream)
            op.deps = self._deps(op)
            self._record(op)

    def _deps(self, op) -> list[int]:  # noqa: ANN001
        deps: set[int] = set()
        last_writer, readers = self.last_writer, self.readers
        for _, b in op.reads:
            w = last_writer.get(b.id)
            if w is not None:
                deps.add(w)
        for _, b in op.writes:
            w = last_writer.get(b.id)
            if w is not None:
                deps.add(w)
            elif b.war_after:
                accessed = self.accessed
                for dead in b.war_after:  # space reuse: previous users finish first
                    deps.update(accessed.get(dead.id, ()))
            r = readers.get(b.id)
            if r:
                deps.update(r)
        if op.hbm_reads or op.hbm_writes:
            self._hbm_deps(op, deps)
        if op.opcode == "DMA_LOAD_TILE":
            self._load_deps(op, deps)
        deps.discard(op.index)
        out = sorted(deps)
        if out and out[-1] > op.index:
            raise RuntimeError(f"schedule: op {op.index} depends on a later op")
        return out

    def _hbm_deps(self, op, deps: set[int]) -> None:  # noqa: ANN001
        dropped, writes, reads = self.dropped, self.hbm_writes, self.hbm_reads
        for h in op.hbm_reads:
            if h[0] in dropped:
                self._dead(h[0], op)
            classes = writes.get(h[0])
            if classes:
                _overlapping(deps, h[1:], classes)
        for h in op.hbm_writes:  # WAW and WAR on HBM bytes
            if h[0] in dropped:
                self._dead(h[0], op)
            classes = writes.get(h[0])
            if classes:
                _overlapping(deps, h[1:], classes)
            classes = reads.get(h[0])
            if classes:
                _overlapping(deps, h[1:], classes)

    def _load_deps(self, op, deps: set[int]) -> None:  # noqa: ANN001
        """The dependencies of a DMA load beyond its data's: how far a load of constants
        may run ahead."""
        role = op.fields.get("tensor_role")
        # a later chunk of a weight tile waits only for the chunk before it (the same
        # buffer): still a prefetch, not a data load
        chunk = bool(deps) and role == "weight" \
            and deps <= {self.last_writer.get(b.id) for _, b in op.writes}
        if deps and not chunk:  # a data load
            self.last_data_load[op.pe] = (op.fused_into or op.layer, op.index)
        elif op.pe in self.last_compute:
            # a load of constants depends on nothing: without a bound the FSM would
            # prefetch every later layer's weights first and starve the critical path.
            # It may run ahead within its layer, but not before the PE's previous layer
            # has computed.
            hist = self.last_compute[op.pe]
            # layers of this PE finished before the load's own layer started
            done = hist[:-1] if hist[-1][0] == (op.fused_into or op.layer) else hist
            if len(done) >= PREFETCH_LAYERS:
                deps.add(done[-PREFETCH_LAYERS][1])
            # nor before the PE's last data load in program order when that is of an
            # earlier layer: the DMA read channel is first come first served, and a
            # prefetch queued ahead of that load would delay the layer waiting for it.
            # (Once the load's own layer has a data load on the PE, e.g. a GEMM's A load
            # before its W load, nothing is held. Holding behind every data load of the
            # previous layer instead was measured slower: docs/performance.md, decode.)
            # A load of the past KV cache is
            # exempt: the attention right after waits for it, and it would wait in turn
            # for the QKV projection it does not depend on
            prev = self.last_data_load.get(op.pe)
            if prev is not None and prev[0] != (op.fused_into or op.layer) and role != "kv":
                deps.add(prev[1])
            # one prefetch in flight per PE (PREFETCH_DEPTH); the past KV cache, which
            # the attention waits for, is not a prefetch and joins no such chain
            if role != "kv":
                mine = self.prefetches.setdefault(op.pe, [])
                if len(mine) >= PREFETCH_DEPTH:
                    deps.add(mine[-PREFETCH_DEPTH])
                mine.append(op.index)
                del mine[:-PREFETCH_DEPTH]

    def _dead(self, key: str, op) -> None:  # noqa: ANN001
        raise RuntimeError(f"schedule: op {op.index} ({op.opcode}, layer {op.layer}) "
                           f"touches storage {key} after its last layer")

    def _record(self, op) -> None:  # noqa: ANN001
        readers, accessed, idx = self.readers, self.accessed, op.index
        for _, b in op.reads:
            readers.setdefault(b.id, []).append(idx)
            accessed.setdefault(b.id, []).append(idx)
        for _, b in op.writes:
            self.last_writer[b.id] = idx
            readers[b.id] = []
            accessed.setdefault(b.id, []).append(idx)
        for b in op.frees:  # never read or written again; its space may still be reused
            self.last_writer.pop(b.id, None)
            readers.pop(b.id, None)
        for h in op.hbm_writes:
            w = h[1:]
            for table in (self.hbm_writes, self.hbm_reads):
                classes = table.get(h[0])
                if classes:  # accesses all of whose bytes writes since have covered
                    _drop_covered(classes, w)
            _classes(self.hbm_writes, h[0]).add(Access(w, idx))
        for h in op.hbm_reads:
            if self.use is None or h[0] in self.use.written:  # else nothing writes it: no WAR
                _classes(self.hbm_reads, h[0]).add(Access(h[1:], idx))
        if not op.opcode.startswith("DMA"):
            hist = self.last_compute.setdefault(op.pe, [])
            layer = op.fused_into or op.layer  # a fused epilogue op is its GEMM's
            if hist and hist[-1][0] == layer:
                hist[-1] = (layer, idx)
            else:
                hist.append((layer, idx))
                del hist[:-PREFETCH_LAYERS - 1]


def _overlapping(deps: set[int], rng: tuple, classes: Classes) -> None:
    """Add to `deps` the op of every access in `classes` that `rng` overlaps (`overlaps`,
    decided per column class for the columns and per access for the hulls)."""
    lo, hi = rng[0], rng[1]
    for cls in classes.meeting(rng):
        for a in classes[cls]:
            r = a.rng
            if lo < r[1] and r[0] < hi:
                deps.add(a.idx)


def _drop_covered(classes: Classes, w: tuple) -> None:
    """Drop the accesses all of whose bytes write `w` and the writes before it have covered
    (`hbm_cover`; `w` overlaps each access it covers part of)."""
    lo, hi = w[0], w[1]
    for cls in classes.meeting(w):
        old = classes[cls]
        kept = [a for a in old if not (lo < a.rng[1] and a.rng[0] < hi and a.cover(w))]
        if len(kept) != len(old):
            if kept:
                classes[cls] = kept
            else:
                classes.drop(cls)


def _classes(table: dict[str, Classes], key: str) -> Classes:
    classes = table.get(key)
    if classes is None:
        classes = table[key] = Classes()
    return classes


def scheduler_for(tiles: TileGraph) -> Scheduler:
    """A Scheduler that forgets what the ops of `tiles` no longer need."""
    use = StorageUse(tiles.node_streams)
    use.see(tiles.ops)
    return Scheduler(use)


@dataclass(frozen=True)
class Schedule:
    """Dependencies of every tile op (`TileOp.deps`)."""

    name: str = "schedule"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("deps",)

    def apply(self, state: CompileState) -> CompileState:
        tiles = state.require_tiles()
        scheduler_for(tiles).feed(tiles.ops)
        return state

    def on_regions(self, state: CompileState, use: StorageUse) -> ScheduleRegions:
        return ScheduleRegions(Scheduler(use))


@dataclass
class ScheduleRegions:
    """The schedule pass region by region: the region's ops get their dependencies; what
    the allocator retired is forgotten."""

    scheduler: Scheduler

    def feed(self, region: Region) -> None:
        self.scheduler.feed(region.ops)
        self.scheduler.forget(region.retired)
        region.kept = self.scheduler.kept()

    def end(self, region: Region) -> None:
        pass
