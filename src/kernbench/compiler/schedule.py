"""Placement, TCM allocation and scheduling passes over the TileGraph.

- placement: program order. Within each lowering phase the per-PE op streams are merged
  round-robin, one op per PE in turn, so that the Control FSM's in-order fetch window
  always holds work for every PE; phases stay in order, so every dependency points back.
- tcm_alloc: a ring allocator per PE over the AllocatableTCM. Buffers are allocated in
  program order and freed after their last use; a buffer never straddles a bank; a new
  buffer takes the oldest free space first (maximal distance to the last use, so loads of
  the next tile overlap compute of this one). Reusing space records which dead buffers
  it overwrites (their readers must finish first).
- schedule: dependencies, as few and as precise as correctness needs: read-after-write
  on TCM buffers (last writer), write-after-read / write-after-write on reused TCM space,
  and on HBM byte ranges read-after-write (a load waits only for the stores that wrote
  bytes it reads), write-after-write and write-after-read.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf
from kernbench.errors import CapacityError

TCM_ALIGN = 64


@dataclass(frozen=True)
class Place:
    name: str = "placement"

    def apply(self, state: CompileState) -> CompileState:
        ops = state.tiles.ops
        order = []
        i = 0
        while i < len(ops):
            j = i
            while j < len(ops) and ops[j].stream == ops[i].stream:
                j += 1
            streams: dict[int, list] = {}
            for o in ops[i:j]:
                streams.setdefault(o.pe, []).append(o)
            queues = [streams[pe] for pe in sorted(streams)]
            pos = [0] * len(queues)
            remaining = j - i
            while remaining:
                for qi, q in enumerate(queues):
                    if pos[qi] < len(q):
                        order.append(q[pos[qi]])
                        pos[qi] += 1
                        remaining -= 1
            i = j
        for idx, o in enumerate(order):
            o.index = idx
        state.tiles.ops = order
        return state


class _Ring:
    def __init__(self, pe: int, capacity: int, bank: int) -> None:
        self.pe = pe
        self.capacity = capacity
        self.bank = bank
        self.cursor = 0
        self.live: list[Buf] = []
        self.dead: dict[int, list[Buf]] = {}  # bank → freed buffers not yet overwritten

    def alloc(self, b: Buf) -> None:
        size = -(-b.nbytes // TCM_ALIGN) * TCM_ALIGN  # every buffer starts 64-byte aligned
        tried = 0
        cur = self.cursor
        while tried < 3 * (self.capacity // max(size, 1) + len(self.live) + 2):
            tried += 1
            if cur // self.bank != (cur + size - 1) // self.bank:
                cur = (cur // self.bank + 1) * self.bank
            if cur + size > self.capacity:
                cur = 0
                continue
            clash = [x for x in self.live if x.offset < cur + size and cur < x.offset + x.nbytes]
            if clash:
                cur = max(x.offset + x.nbytes for x in clash)
                cur = -(-cur // TCM_ALIGN) * TCM_ALIGN
                continue
            bank_dead = self.dead.get(cur // self.bank, [])
            reused = [x for x in bank_dead if x.offset < cur + size and cur < x.offset + x.nbytes]
            if reused:
                self.dead[cur // self.bank] = [x for x in bank_dead if x not in reused]
            b.war_after = reused
            b.offset = cur
            b.bank, b.bank_offset = divmod(cur, self.bank)
            self.live.append(b)
            self.cursor = cur + size
            return
        raise CapacityError(
            f"TCM overflow on PE {self.pe}: {b.label} needs {size} B; live buffers: "
            + ", ".join(f"{x.label}({x.nbytes})" for x in self.live[:6]))

    def free(self, b: Buf) -> None:
        if b in self.live:
            self.live.remove(b)
            self.dead.setdefault(b.offset // self.bank, []).append(b)


@dataclass(frozen=True)
class AllocateTcm:
    name: str = "tcm_alloc"

    def apply(self, state: CompileState) -> CompileState:
        tcm = state.topology.config.cube.pe_template.pe_tcm
        bank = tcm.capacity_kib * 1024 // tcm.banks
        cap = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        rings: dict[int, _Ring] = {}
        for op in state.tiles.ops:
            ring = rings.setdefault(op.pe, _Ring(op.pe, cap, bank))
            for _, b in op.writes + op.reads:
                if b.offset is None:
                    ring.alloc(b)
            for b in op.frees:
                ring.free(b)
        state.tiles.allocated = True
        return state


def overlaps(a: tuple, b: tuple) -> bool:
    """Do two HBM ranges (lo, hi, stride, row_bytes) of one storage share a byte?"""
    lo1, hi1, st1, rb1 = a
    lo2, hi2, st2, rb2 = b
    if not (lo1 < hi2 and lo2 < hi1):
        return False
    if st1 == st2 and rb1 < st1 and rb2 < st2:
        # same row pitch: overlapping only if the column intervals meet
        c1 = lo1 % st1
        c2 = lo2 % st1
        if c1 + rb1 <= st1 and c2 + rb2 <= st1:
            return c1 < c2 + rb2 and c2 < c1 + rb1
    return True


@dataclass(frozen=True)
class Schedule:
    name: str = "schedule"

    def apply(self, state: CompileState) -> CompileState:
        # PE → (layer of its latest compute op, that op, the latest compute op of an earlier
        # layer): bounds how far ahead loads of constants may run
        last_compute: dict[int, tuple[str, int, int | None]] = {}
        last_writer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        accessed: dict[int, list[int]] = {}
        hbm_writes: dict[str, list[tuple[tuple, int]]] = {}
        hbm_reads: dict[str, list[tuple[tuple, int]]] = {}
        for op in state.tiles.ops:
            deps: set[int] = set()
            for _, b in op.reads:
                w = last_writer.get(b.id)
                if w is not None:
                    deps.add(w)
            for _, b in op.writes:
                if b.id not in last_writer and b.war_after:
                    for dead in b.war_after:  # space reuse: previous users finish first
                        deps.update(accessed.get(dead.id, ()))
                w = last_writer.get(b.id)
                if w is not None:
                    deps.add(w)
                deps.update(readers.get(b.id, ()))
            for key, *rng in op.hbm_reads:
                for other, idx in hbm_writes.get(key, ()):
                    if overlaps(rng, other):
                        deps.add(idx)
            for key, *rng in op.hbm_writes:  # WAW and WAR on HBM bytes
                for other, idx in hbm_writes.get(key, []) + hbm_reads.get(key, []):
                    if overlaps(rng, other):
                        deps.add(idx)
            if not deps and op.opcode == "DMA_LOAD_TILE" and op.pe in last_compute:
                # a load of constants depends on nothing: without a bound the FSM would
                # prefetch every later layer's weights first and starve the critical path.
                # It may run ahead within its layer, but not before the PE's previous layer
                # has computed.
                layer, idx, before = last_compute[op.pe]
                bound = before if layer == op.layer else idx
                if bound is not None:
                    deps.add(bound)
            deps.discard(op.index)
            if any(d > op.index for d in deps):
                raise RuntimeError(f"schedule: op {op.index} depends on a later op")
            op.deps = sorted(deps)
            for _, b in op.reads:
                readers.setdefault(b.id, []).append(op.index)
                accessed.setdefault(b.id, []).append(op.index)
            for _, b in op.writes:
                last_writer[b.id] = op.index
                readers[b.id] = []
                accessed.setdefault(b.id, []).append(op.index)
            for key, *rng in op.hbm_writes:
                hbm_writes.setdefault(key, []).append((tuple(rng), op.index))
            for key, *rng in op.hbm_reads:
                hbm_reads.setdefault(key, []).append((tuple(rng), op.index))
            if not op.opcode.startswith("DMA"):
                prev = last_compute.get(op.pe)
                if prev is None:
                    last_compute[op.pe] = (op.layer, op.index, None)
                elif prev[0] == op.layer:
                    last_compute[op.pe] = (op.layer, op.index, prev[2])
                else:
                    last_compute[op.pe] = (op.layer, op.index, prev[1])
        return state
