"""PE_TCM: the PE's scratchpad. A bandwidth-serialised port and the TCM partition.

Address space [0, capacity): banks of capacity / banks bytes, address = bank × bank_bytes
+ offset. The top `reserved_kib` are SchedulerReservedTCM (composite-tile staging, owned
by PE_SCHEDULER); the rest is AllocatableTCM, handed out by the per-PE `PeMemAllocator`,
which by construction never sees a reserved byte.
"""

from __future__ import annotations

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.counters import MemoryCounters
from kernbench.components.fabric import InterleavedServer, Server
from kernbench.errors import CapacityError


class PeMemAllocator:
    """First-fit allocator over AllocatableTCM [0, limit). Blocks are (offset, size)."""

    def __init__(self, owner: str, limit: int, align: int = 64) -> None:
        self.owner = owner
        self.limit = limit
        self.align = align
        self._blocks: list[tuple[int, int]] = []  # sorted by offset

    def alloc(self, nbytes: int, who: str = "") -> int:
        size = -(-nbytes // self.align) * self.align
        cursor = 0
        for i, (off, sz) in enumerate(self._blocks):
            if off - cursor >= size:
                self._blocks.insert(i, (cursor, size))
                return cursor
            cursor = off + sz
        if self.limit - cursor >= size:
            self._blocks.append((cursor, size))
            return cursor
        raise CapacityError(
            f"{self.owner}: TCM overflow: {who or 'allocation'} needs {nbytes} bytes, "
            f"{self.free_bytes()} of {self.limit} allocatable bytes free"
        )

    def free(self, offset: int) -> None:
        for i, (off, _) in enumerate(self._blocks):
            if off == offset:
                del self._blocks[i]
                return
        raise KeyError(offset)

    def free_bytes(self) -> int:
        return self.limit - sum(sz for _, sz in self._blocks)


@register("pe_tcm", "pe_tcm_v1")
class PeTcm(ComponentBase):
    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        s = self.spec
        self.capacity = s.capacity_kib * 1024
        self.bank_bytes = self.capacity // s.banks
        self.reserved_bytes = s.reserved_kib * 1024
        self.reserved_base = self.capacity - self.reserved_bytes
        cls = InterleavedServer if s.port_interleave else Server
        self.port = cls(f"{self.id}.port", s.latency_ns, s.bw_gbs)
        self.allocator = PeMemAllocator(self.id, self.reserved_base)

    def address(self, bank: int, offset: int) -> int:
        return bank * self.bank_bytes + offset

    def check(self, addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or addr + nbytes > self.capacity:
            raise CapacityError(
                f"{what}: TCM range [{addr}, {addr + nbytes}) beyond {self.id} "
                f"capacity {self.capacity} bytes"
            )

    def memory_counters(self) -> MemoryCounters:
        """Bytes and busy time of the TCM port."""
        return MemoryCounters(self.id, self.KIND, self.port.bytes, self.port.busy_ns)
