"""TCM allocation pass: a ring allocator per PE over the AllocatableTCM.

Buffers are allocated in program order and freed after their last use; a buffer never
straddles a bank and starts 64-byte aligned; a new buffer takes the oldest free space first
(maximal distance to the last use, so loads of the next tile overlap compute of this one).
Reusing space records which dead buffers it overwrites (`Buf.war_after`: their readers
must finish first, which the schedule pass turns into dependencies). Dead space is kept as
disjoint parts: a new buffer takes the bytes it covers out of them, so a later buffer over
those bytes waits for it (and through it for the dead one's users); a dead buffer with no
part left is retired (`TcmAllocator.feed` returns it: nobody will wait for its users
again). A buffer that finds no space is a `CapacityError` naming the PE and the live
buffers. `TcmAllocator` is fed ops in program order: the whole program (this pass) or one
IR node's ops at a time (`compiler.stream`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar

from kernbench.compiler.region import Region, StorageUse
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileOp
from kernbench.errors import CapacityError
from kernbench.topology.model import Topology

TCM_ALIGN = 64


#: a dead part's first byte and its end, the keys its list is searched by: C callables,
#: not Python functions (a bisect calls its key at every probe)
_start = itemgetter(0)
_end = itemgetter(1)


class _Ring:
    """The free space of one PE's AllocatableTCM, handed out oldest-free-first."""

    def __init__(self, pe: int, capacity: int, bank: int) -> None:
        self.pe = pe
        self.capacity = capacity
        self.bank = bank
        self.cursor = 0
        self.live: list[Buf] = []
        # bank → the parts of freed buffers not overwritten since: (first byte, end, buffer),
        # disjoint (a part leaves as soon as a new buffer takes its bytes), in address
        # order: the parts a new buffer meets are one run of the list
        self.dead: dict[int, list[tuple[int, int, Buf]]] = {}
        self._parts: dict[int, int] = {}  # buffer id → its parts in `dead`
        self.retired: list[Buf] = []  # dead buffers wholly overwritten since last asked

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
            b.war_after = self._take(cur, cur + size)
            b.offset = cur
            b.bank, b.bank_offset = divmod(cur, self.bank)
            self.live.append(b)
            self.cursor = cur + size
            return
        raise CapacityError(
            f"TCM overflow on PE {self.pe}: {b.label} needs {size} B; live buffers: "
            + ", ".join(f"{x.label}({x.nbytes})" for x in self.live[:6]))

    def _take(self, lo: int, hi: int) -> list[Buf]:
        """The dead buffers with bytes in [lo, hi) (the new buffer waits for their users);
        those bytes leave the dead parts: a later buffer over them waits for this one,
        which waited for those users. A buffer with no part left is retired."""
        bank_dead = self.dead.get(lo // self.bank)
        if not bank_dead:
            return []
        # disjoint parts in address order: their ends are in order too
        first = bisect_right(bank_dead, lo, key=_end)
        last = bisect_left(bank_dead, hi, lo=first, key=_start)
        reused: dict[int, Buf] = {}
        keep = []
        for p in bank_dead[first:last]:
            a, e, x = p
            reused[x.id] = x
            rest = [(a, lo, x)] * (a < lo) + [(hi, e, x)] * (hi < e)
            keep += rest
            self._parts[x.id] += len(rest) - 1
            if not self._parts[x.id]:
                del self._parts[x.id]
                self.retired.append(x)
        bank_dead[first:last] = keep
        return list(reused.values())

    def free(self, b: Buf) -> None:
        if b in self.live:
            self.live.remove(b)
            insort(self.dead.setdefault(b.offset // self.bank, []),
                   (b.offset, b.offset + b.nbytes, b), key=_start)
            self._parts[b.id] = 1


class TcmAllocator:
    """The allocation pass's state, fed ops in program order (`feed`): the whole program
    (the `AllocateTcm` pass) or one layer at a time (`compiler.stream`)."""

    def __init__(self, topology: Topology) -> None:
        tcm = topology.config.cube.pe_template.pe_tcm
        self.bank = tcm.capacity_kib * 1024 // tcm.banks
        self.cap = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        self.rings: dict[int, _Ring] = {}

    def feed(self, ops: list[TileOp]) -> list[Buf]:
        """Give the buffers of `ops` their offsets; return the dead buffers whose space was
        wholly reused meanwhile (no later buffer can reuse them: their users are no
        longer needed for WAR dependencies)."""
        for op in ops:
            ring = self.rings.get(op.pe)
            if ring is None:
                ring = self.rings[op.pe] = _Ring(op.pe, self.cap, self.bank)
            for _, b in op.writes + op.reads:
                if b.offset is None:
                    ring.alloc(b)
            for b in op.frees:
                ring.free(b)
        retired: list[Buf] = []
        for ring in self.rings.values():
            retired += ring.retired
            ring.retired = []
        return retired


@dataclass(frozen=True)
class AllocateTcm:
    """Give every TCM buffer an offset (a ring allocator per PE)."""

    name: str = "tcm_alloc"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("tcm",)

    def apply(self, state: CompileState) -> CompileState:
        tiles = state.require_tiles()
        TcmAllocator(state.topology).feed(tiles.ops)
        tiles.allocated = True
        return state

    def on_regions(self, state: CompileState, use: StorageUse) -> AllocateRegions:
        return AllocateRegions(TcmAllocator(state.topology))


@dataclass
class AllocateRegions:
    """The allocation pass region by region: the region's buffers get their offsets; the
    buffers whose space was wholly reused meanwhile are handed on (`Region.retired`)."""

    allocator: TcmAllocator

    def feed(self, region: Region) -> None:
        region.retired = self.allocator.feed(region.ops)

    def end(self, region: Region) -> None:
        pass
