"""PE_FETCH_STORE (ADR-0021 D5): TCM ↔ register file, over the TCM port.

Two channels so a fetch stuck behind a busy compute engine never blocks the store that
would free it (a single queue serving both directions can deadlock the pipeline).
Stage params: nbytes.
"""

from __future__ import annotations

from kernbench.common.tile_plan import StageType
from kernbench.components.base import PeEngineBase
from kernbench.components.catalog import register
from kernbench.components.fabric import transfer
from kernbench.components.ports import Port


@register("pe_fetch_store", "pe_fetch_store_v1")
class PeFetchStore(PeEngineBase):
    CHANNELS = {"fetch": (StageType.FETCH,), "store": (StageType.STORE,)}
    PORTS = (Port("tcm", "pe_tcm", doc="its PE's scratchpad (the port it moves bytes over)"),)

    def connect(self) -> None:
        self._stages = (self.peer("tcm").port,)

    def service(self, token) -> float:  # noqa: ANN001
        nbytes = token.params.get("nbytes", 0)
        if nbytes <= 0:
            return 0.0
        now = self.env.now
        return transfer(now, nbytes, self._stages) - now
