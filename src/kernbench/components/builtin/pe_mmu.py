"""PE_MMU: address translation. Physical addresses for now: identity plus a fixed cost."""

from __future__ import annotations

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register


@register("pe_mmu", "pe_mmu_v1")
class PeMmu(ComponentBase):
    def translate(self, addr: int) -> tuple[int, float]:
        """Virtual → physical address and the translation latency (ns)."""
        return addr, self.spec.translation_latency_ns
