"""The cost model's timeline: every op of a program placed by a list schedule over the
hardware's resources (amended; docs/compiler.md "Cost model").

Ops are taken in the order they become ready (their dependencies done, the Control FSM's
issue window open), lowest id first among equals, and each is placed once, whole:
- the M_CPU issues one entry per issue latency; the command crosses the command links,
  waits for its PE's PE_CPU and PE_SCHEDULER (each one dispatch at a time);
- the scheduler feeds the op's tiles in order, a composite tile only when its staging
  bytes fit in the TCM's reserved region (which bounds the tiles in flight: the double
  buffering);
- each tile's stages run through the PE's engine channels (one tile at a time each; a
  stage takes the earliest gap of its uncontended length at or after it arrives, as the
  channel's FIFO would serve it); a DMA, a weight stream, a fetch or a store is a
  transfer over the same reservation servers the simulator uses
  (`components.fabric.Server` / `transfer`: links, the TCM port, HBM channels with their
  interleaved shares), so bandwidth shared between PEs on one HBM, mesh link or UCIe
  queues the later transfer as the hardware model does;
- the completion crosses back to the M_CPU.
What it leaves out: an op is placed whole, so an op placed later cannot take a slot an
earlier-placed op holds even if the simulator would have served it first; a stage that
queueing made longer than its gap is clipped there; the first-stage queue depth; and the
issue window is approximated (entry i waits for entry i − W to complete, where the
hardware waits for any W entries). Costs O(ops × stages).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import StageType
from kernbench.components.builtin.hbm_ctrl import channel_shares
from kernbench.components.builtin.pe_dma import wire_bytes
from kernbench.components.builtin.pe_scheduler import split_transfers
from kernbench.components.fabric import Server, transfer
from kernbench.topology.model import Pe, Topology

INF = float("inf")


@dataclass(frozen=True, slots=True)
class Placed:
    """An op on the estimated timeline: `start` (its first engine starts, like the
    simulator's `start_ns`) and `end` (its completion is back at the M_CPU, `end_ns`)."""

    start: float
    end: float


class _Hbm:
    """One cube's HBM as a transfer stage: each channel serves its interleaved share."""

    __slots__ = ("channels", "interleave", "latency_ns", "base", "shares")

    def __init__(self, spec: Any, base: int, name: str) -> None:
        self.channels = [Server(f"{name}.ch{i}", 0.0, spec.channel_bw_gbs)
                         for i in range(spec.channels)]
        self.interleave = spec.interleave_bytes
        self.latency_ns = spec.latency_ns
        self.base = base
        self.shares: list[tuple[int, int]] = []

    def at(self, addr: int, nbytes: int) -> _Hbm:
        self.shares = channel_shares(addr - self.base, nbytes, self.interleave,
                                     len(self.channels))
        return self

    def occupy(self, head_ns: float, nbytes: int, min_end_ns: float,
               now: float) -> tuple[float, float]:
        start, end = INF, min_end_ns
        for ch, b in self.shares:
            s, e = self.channels[ch].occupy(head_ns, b, 0.0, now)
            start, end = min(start, s), max(end, e)
        return (head_ns if start == INF else start), end


class _Channel:
    """An engine channel: one tile at a time, each placed in the earliest gap of its
    uncontended length at or after its arrival (arrival order, as the channel's FIFO
    serves it, for ops placed out of time order). Reservations are disjoint, sorted."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def place(self, t: float, dur: float, now: float) -> float:
        """The start of a `dur`-long stage arriving at `t`; forgets what ended before `now`."""
        starts, ends = self.starts, self.ends
        if ends and ends[0] <= now:
            k = bisect_right(ends, now)
            del starts[:k], ends[:k]
        i = bisect_right(ends, t)
        s = t
        while i < len(starts) and s + dur > starts[i]:
            s = max(s, ends[i])
            i += 1
        return s

    def book(self, s: float, e: float) -> None:
        """Hold [s, e] (clipped at the next reservation: a stage that queueing made longer
        than its gap overlaps it by that much)."""
        i = bisect_right(self.starts, s)
        if i < len(self.starts):
            e = min(e, self.starts[i])
        self.starts.insert(i, s)
        self.ends.insert(i, e)


class _Machine:
    """The resources one schedule reserves: servers for links, TCM ports, HBM channels,
    the shared SRAMs; free times for engine channels and the per-PE dispatchers."""

    def __init__(self, topology: Topology) -> None:
        self.topo = topology
        cfg = topology.config.cube
        self.pt = cfg.pe_template
        self.links = {lid: Server(lid, ln.latency_ns, ln.bw_gbs)
                      for lid, ln in topology.links.items()}
        t = self.pt.pe_tcm
        self.tcm = [Server(f"{pe.tcm}.port", t.latency_ns, t.bw_gbs) for pe in topology.pes]
        self.hbm = [_Hbm(cfg.hbm_ctrl, c.hbm_base, c.hbm_ctrl) for c in topology.cubes]
        s = cfg.shared_sram
        self.sram = [Server(f"{c.sram}", 0.0, s.bw_gbs) if s is not None else None
                     for c in topology.cubes]
        self.free: dict[Any, float] = {}
        self.channels: dict[Any, _Channel] = {}
        #: the ready time of the op being placed: no later op's transfer starts before it
        self.now = 0.0
        self._paths: dict[tuple[Any, ...], list[Any]] = {}

    def path(self, pe: Pe, space: str, addr: int, write: bool) -> tuple[list[Any], Any]:
        """(links from the memory holding `addr` to `pe`, the memory's stage)."""
        topo = self.topo
        if space == "sram":
            cube = next(c for c in topo.cubes if c.sram_base <= addr < c.sram_base + c.sram_bytes)
            key: tuple[Any, ...] = ("sram", pe.index, cube.index, write)
            if key not in self._paths:
                self._paths[key] = [self.links[i] for i in
                                    topo.memory_path(pe, cube.sram, cube.sram_router, write)]
            return self._paths[key], self.sram[cube.index]
        cube = topo.cube_of_hbm(addr)
        key = ("hbm", pe.index, cube.index, write)
        if key not in self._paths:
            hr = topo.hbm_router_for(pe.router, cube)
            self._paths[key] = [self.links[i] for i in
                                topo.memory_path(pe, cube.hbm_ctrl, hr, write)]
        return self._paths[key], self.hbm[cube.index]

    def command(self, pe: Pe, to_pe: bool) -> list[Server]:
        key = ("cmd", pe.index, to_pe)
        if key not in self._paths:
            self._paths[key] = [self.links[i] for i in
                                self.topo.command_path(self.topo.cubes[0], pe, to_pe)]
        return self._paths[key]

    def dma(self, pe: Pe, p: dict[str, Any], write: bool, start: float) -> float:
        """End of one DMA transfer whose channel takes it at `start` (pe_dma.service)."""
        d = self.pt.pe_dma
        wire = wire_bytes(d.burst_bytes, p.get("nbytes", 0), p.get("rows", 1))
        addr = p.get("addr", 0)
        links, mem = self.path(pe, p.get("space", "hbm"), addr, write)
        if isinstance(mem, _Hbm):
            mem = mem.at(addr, wire)
        tcm = self.tcm[pe.index]
        stages = [tcm, *links, mem] if write else [mem, *links, tcm]
        begin = start + d.setup_cycles / d.clock_ghz + self.pt.pe_mmu.translation_latency_ns
        return transfer(begin, wire, stages, self.now)

    def stage(self, pe: Pe, st: StageType, p: dict[str, Any], t: float,
              model: Any) -> tuple[float, float]:
        """Place one stage that arrives at its engine at `t`: (start, end). The channel's
        gap is sought for the stage's uncontended time (`model.stage`); transfers then
        queue on the servers they cross."""
        res, busy, _ = model.stage(pe, st, p)
        chan = self.channels.get(res)
        if chan is None:
            chan = self.channels[res] = _Channel()
        s = chan.place(t, busy, self.now)
        if st in (StageType.DMA_READ, StageType.DMA_WRITE):
            end = self.dma(pe, p, st == StageType.DMA_WRITE, s)
        elif st in (StageType.FETCH, StageType.STORE):
            nb = p.get("nbytes", 0)
            end = transfer(s, nb, (self.tcm[pe.index],), self.now) if nb > 0 else s
        else:
            end = s + busy
            stream = p.get("weight_stream_nbytes", 0) if st == StageType.GEMM else 0
            if stream:  # weights streamed from HBM straight into the array (pe_gemm)
                links, mem = self.path(pe, "hbm", p.get("weight_addr", 0), False)
                mem = mem.at(p.get("weight_addr", 0), stream)
                end = max(end, transfer(s, stream, [mem, *links], self.now))
        chan.book(s, end)
        return s, end


def _staging_at(held: list[tuple[float, int]], t: float, need: int, cap: int) -> float:
    """Earliest time ≥ `t` at which `need` more staging bytes fit beside the tiles in
    `held` (their release time, bytes); drops the releases before the answer."""
    held.sort()
    while True:
        used = sum(b for e, b in held if e > t)
        if used + need <= cap:
            held[:] = [(e, b) for e, b in held if e > t]
            return t
        t = next(e for e, _ in held if e > t)


def schedule(entries: Sequence[ProgramEntry], topology: Topology,
             model: Any) -> dict[int, Placed]:
    """Place every command entry of `entries` (ids are program positions) on one timeline;
    `model` is the `cost.CostModel` whose engine formulas price the stages. Barriers,
    NOPs and END take no time; the issue window W holds entry i back until entry i − W
    has completed (an approximation: the FSM fetches in order and any completion frees a
    slot)."""
    m = _Machine(topology)
    mcpu, pt = model.mcpu, m.pt
    issue_ns = mcpu.issue_latency_cycles / mcpu.clock_ghz
    cpu_ns = pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
    sched_ns = pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz
    cap = pt.pe_tcm.reserved_kib * 1024
    limit = pt.pe_scheduler.max_transfer_bytes
    window = mcpu.issue_window
    n = len(entries)
    preds: list[list[int]] = [[] for _ in range(n)]
    barrier = -1
    for e in entries:
        ps = [*e.deps, *e.wait_for]
        if barrier >= 0 and e.id != barrier:
            ps.append(barrier)
        if e.id >= window:
            ps.append(e.id - window)
        preds[e.id] = ps
        if e.kind == "barrier":
            barrier = e.id
    left = [len(set(p)) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for d in set(ps):
            succ[d].append(i)
    ready_at = [0.0] * n
    done = [0.0] * n
    heap = [(0.0, i) for i in range(n) if left[i] == 0]
    heapq.heapify(heap)
    issue_free = 0.0
    staging: dict[int, list[tuple[float, int]]] = {}
    out: dict[int, Placed] = {}
    while heap:
        ready, i = heapq.heappop(heap)
        e = entries[i]
        if e.command is None:
            done[i] = ready
        else:
            m.now = ready
            issue_free = max(ready, issue_free) + issue_ns
            pe = topology.pes[e.pe]
            arrive = transfer(issue_free, mcpu.command_bytes, m.command(pe, True), ready)
            s_cpu = m.free[("cpu", e.pe)] = max(arrive, m.free.get(("cpu", e.pe), 0.0)) + cpu_ns
            s_sched = max(s_cpu, m.free.get(("sched", e.pe), 0.0)) + sched_ns
            m.free[("sched", e.pe)] = s_sched
            # the feeder puts one command's tiles in after the previous command's
            fed = max(s_sched, m.free.get(("feed", e.pe), 0.0))
            first, end = INF, fed
            held = staging.setdefault(e.pe, [])
            for k, stages in enumerate(e.command.tiles()):
                need = e.command.staging_bytes(k)
                if need:
                    fed = _staging_at(held, fed, need, cap)
                if limit:
                    stages = split_transfers(stages, limit)
                t = fed
                for st, p in stages:
                    s, t = m.stage(pe, st, p, t, model)
                    first = min(first, s)
                if need:
                    held.append((t, need))
                end = max(end, t)
            m.free[("feed", e.pe)] = fed
            done[i] = transfer(end, mcpu.command_bytes, m.command(pe, False), ready)
            out[e.id] = Placed(end if first == INF else first, done[i])
        for j in succ[i]:
            ready_at[j] = max(ready_at[j], done[i])
            left[j] -= 1
            if left[j] == 0:
                heapq.heappush(heap, (ready_at[j], j))
    return out


__all__ = ["Placed", "schedule"]
