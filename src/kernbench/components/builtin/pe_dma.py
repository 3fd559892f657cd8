"""PE_DMA: one read channel (memory → TCM) and one write channel (TCM → memory).

Each channel serves one transfer at a time; read and write overlap. Cost
(CMDQ spec §7.3): bytes → bursts → the wire: every row of a transfer is rounded up to
whole bursts; then setup cycles, then the fabric path PE ↔ router ↔ mesh ↔ memory port ↔
memory and the TCM port, each a contended server (components.fabric).
Stage params: nbytes, space ("hbm" | "sram" | "tcm"), addr, rows (default 1); a "tcm"
write is a copy into the TCMs of the PEs ``dst_pes`` (a multicast, `mcast_stages`).
With ``hbm_read_bytes_per_cycle`` set, a read of HBM also passes the PE's own reader (one
server of that rate, just before the TCM port): a core that issues tile-sized reads and
waits for each block pulls DRAM no faster than that on average over a read, its DRAM trip
included, however idle the links and banks are; the links and channels upstream are held
only at their own rates.
"""

from __future__ import annotations

from kernbench.common.tile_plan import StageType
from kernbench.components.arbiter import LoopEvent, done_at, pending, token_key
from kernbench.components.base import PeEngineBase
from kernbench.components.catalog import register
from kernbench.components.fabric import Server, mypyc_attr, transfer
from kernbench.components.ports import Port


def wire_bytes(burst_bytes: int, nbytes: int, rows: int) -> int:
    """Bytes on the wire of an `nbytes` transfer in `rows` rows: each row rounded up to whole
    bursts (the engine and the compiler's cost model both call this)."""
    row = -(-nbytes // rows) if rows > 1 else nbytes
    return rows * (-(-row // burst_bytes) * burst_bytes)


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class PeDma(PeEngineBase):
    CHANNELS = {"read": (StageType.DMA_READ,), "write": (StageType.DMA_WRITE,)}
    PORTS = (Port("tcm", "pe_tcm", doc="its PE's scratchpad"),
             Port("mmu", "pe_mmu", doc="address translation"))

    def connect(self) -> None:
        self.pe = self.sim.topology.pe(self.node.pe)
        self.tcm = self.peer("tcm")
        self.mmu = self.peer("mmu")
        self.bytes_read = 0
        self.bytes_written = 0
        rate = self.spec.hbm_read_bytes_per_cycle
        self.reader = (None if rate is None else
                       Server(f"{self.node.id}.reader", 0.0, rate * self.spec.clock_ghz))

    def wire_bytes(self, nbytes: int, rows: int) -> int:
        return wire_bytes(self.spec.burst_bytes, nbytes, rows)

    def service(self, token) -> LoopEvent:  # noqa: ANN001
        """The transfer's stages now (address errors are raised here); the reservation at
        this instant's grant (components.arbiter), in (command, tile, stage) order."""
        p = token.params
        nbytes = p["nbytes"]
        rows = p.get("rows", 1)
        wire = self.wire_bytes(nbytes, rows)
        addr, mmu_ns = self.mmu.translate(p.get("addr", 0))
        now = self.env._now
        start = now + self.spec.setup_cycles / self.spec.clock_ghz + mmu_ns
        space = p.get("space", "hbm")
        ev = pending(self.env)
        if space == "tcm":
            stages = self.sim.mcast_stages(self.pe, p["dst_pes"], wire)
            self.sim.arbiter.request(token_key(token), self._mcast, token, p["dst_pes"], wire,
                                     start, stages, ev)
            return ev
        write = token.stage.stage_type == StageType.DMA_WRITE
        stages = self.sim.dma_stages(self.pe, space, addr, wire, write,
                                     f"{token.label} tile {token.tile_id}")
        if not write:  # a read of another chip's memory first sends its request there
            start += self.sim.read_request_ns(self.pe, space, addr)
        self.sim.arbiter.request(token_key(token), self._reserve, token, space, wire, write,
                                 start, stages, ev)
        return ev

    def _reserve(self, token, space: str, wire: int, write: bool, start: float,  # noqa: ANN001
                 stages: list, ev: LoopEvent) -> None:
        timed = stages
        if self.reader is not None and space == "hbm" and not write:
            timed = [*stages[:-1], self.reader, stages[-1]]
        end = transfer(start, wire, timed)
        # stages are memory, links, TCM port (reads) or TCM port, links, memory (writes)
        cmd = token.pipeline_ctx.command
        self.sim.actions.dma(cmd, space, wire, stages[1:-1], "read" if write else "write",
                             start, end)
        mem = stages[-1] if write else stages[0]
        for links, b in getattr(mem, "link_shares", ()):  # per-channel ports
            self.sim.actions.links(cmd, links, b, start, end)
        if write:
            self.bytes_written += wire
        else:
            self.bytes_read += wire
        done_at(self.env, ev, end)

    def _mcast(self, token, dst_pes: list[int], wire: int, start: float,  # noqa: ANN001
               stages: list, ev: LoopEvent) -> None:
        """A copy into the TCMs of `dst_pes`: one pipelined transfer (`mcast_stages`)."""
        end = transfer(start, wire, stages)
        cmd = token.pipeline_ctx.command
        self.sim.actions.links(cmd, [s for s in stages if s.id in self.sim.topology.links], wire,
                               start, end)
        self.sim.actions.add(cmd, "tcm_read_byte", wire, start, end)
        self.sim.actions.add(cmd, "tcm_write_byte", wire * len(dst_pes), start, end)
        self.bytes_written += wire * len(dst_pes)
        done_at(self.env, ev, end)

    def stats(self) -> dict:
        return {"bytes_read": self.bytes_read, "bytes_written": self.bytes_written}


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("pe_dma", "pe_dma_v1")(PeDma)
