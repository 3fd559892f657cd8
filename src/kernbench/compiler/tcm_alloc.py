"""TCM allocation pass: a ring allocator per PE over the AllocatableTCM.

Buffers are allocated in program order and freed after their last use; a buffer never
straddles a bank and starts 64-byte aligned; a new buffer takes the oldest free space first
(maximal distance to the last use, so loads of the next tile overlap compute of this one).
Reusing space records which dead buffers it overwrites (`Buf.war_after`: their readers
must finish first, which the schedule pass turns into dependencies). A buffer that finds
no space is a `CapacityError` naming the PE and the live buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf
from kernbench.errors import CapacityError

TCM_ALIGN = 64


class _Ring:
    """The free space of one PE's AllocatableTCM, handed out oldest-free-first."""

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
                # a dead buffer leaves the list only when this one covers it whole: the next
                # buffer over its remaining bytes must wait for its readers too
                self.dead[cur // self.bank] = [
                    x for x in bank_dead
                    if x not in reused or x.offset < cur or x.offset + x.nbytes > cur + size]
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
    """Give every TCM buffer an offset (a ring allocator per PE)."""

    name: str = "tcm_alloc"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("tcm",)

    def apply(self, state: CompileState) -> CompileState:
        tcm = state.topology.config.cube.pe_template.pe_tcm
        bank = tcm.capacity_kib * 1024 // tcm.banks
        cap = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        rings: dict[int, _Ring] = {}
        tiles = state.require_tiles()
        for op in tiles.ops:
            ring = rings.setdefault(op.pe, _Ring(op.pe, cap, bank))
            for _, b in op.writes + op.reads:
                if b.offset is None:
                    ring.alloc(b)
            for b in op.frees:
                ring.free(b)
        tiles.allocated = True
        return state
