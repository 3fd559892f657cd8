"""Shared SRAM of a cube: one bandwidth server behind a router port, bounds-checked."""

from __future__ import annotations

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.counters import MemoryCounters
from kernbench.components.fabric import Server
from kernbench.errors import AddressError


@register("shared_sram", "sram_v1")
class SharedSram(ComponentBase):
    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        cube = sim.topology.cube(node.cube)
        self.base = cube.sram_base
        self.size = cube.sram_bytes
        # the port link carries the latency; the array itself serialises at bw_gbs.
        self.server = Server(f"{self.id}.array", 0.0, self.spec.bw_gbs)

    def stage(self, addr: int, nbytes: int, what: str = "access") -> Server:
        if addr < self.base or addr + nbytes > self.base + self.size:
            raise AddressError(
                f"{what}: SRAM range [{addr:#x}, {addr + nbytes:#x}) outside {self.id}"
            )
        return self.server

    def memory_counters(self) -> MemoryCounters:
        """Bytes and busy time of the SRAM array."""
        return MemoryCounters(self.id, self.KIND, self.server.bytes, self.server.busy_ns)
