"""PE_FETCH_STORE: TCM ↔ register file, over the TCM port.

Two channels so a fetch stuck behind a busy compute engine never blocks the store that
would free it (a single queue serving both directions can deadlock the pipeline).
Stage params: nbytes.
"""

from __future__ import annotations

from kernbench.common.tile_plan import StageType
from kernbench.components.arbiter import LoopEvent, done_at, pending, token_key
from kernbench.components.base import PeEngineBase
from kernbench.components.catalog import register
from kernbench.components.fabric import mypyc_attr, transfer
from kernbench.components.ports import Port


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class PeFetchStore(PeEngineBase):
    CHANNELS = {"fetch": (StageType.FETCH,), "store": (StageType.STORE,)}
    PORTS = (Port("tcm", "pe_tcm", doc="its PE's scratchpad (the port it moves bytes over)"),)

    def connect(self) -> None:
        self._stages = (self.peer("tcm").port,)
        self.bytes_fetched = 0
        self.bytes_stored = 0

    def service(self, token) -> float | LoopEvent:  # noqa: ANN001
        """0 for an empty move; else the TCM port's reservation at this instant's grant."""
        nbytes = token.params.get("nbytes", 0)
        if nbytes <= 0:
            return 0.0
        ev = pending(self.env)
        self.sim.arbiter.request(token_key(token), self._reserve, token, nbytes, ev)
        return ev

    def _reserve(self, token, nbytes: int, ev: LoopEvent) -> None:  # noqa: ANN001
        now = self.env._now
        end = transfer(now, nbytes, self._stages)
        cmd = token.pipeline_ctx.command
        if token.stage.stage_type == StageType.FETCH:  # TCM → registers
            self.bytes_fetched += nbytes
            items = (("tcm_read_byte", nbytes), ("rf_write_byte", nbytes))
        else:  # registers → TCM
            self.bytes_stored += nbytes
            items = (("rf_read_byte", nbytes), ("tcm_write_byte", nbytes))
        self.sim.actions.count(cmd, items, now, end)
        done_at(self.env, ev, end)

    def stats(self) -> dict:
        return {"bytes_fetched": self.bytes_fetched, "bytes_stored": self.bytes_stored}


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("pe_fetch_store", "pe_fetch_store_v1")(PeFetchStore)
