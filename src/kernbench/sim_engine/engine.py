"""The simulator: builds components from a Topology, binds their ports, runs SimPy.

It implements components.ports.SimContext, the only view of it components have. Ports are
bound from the topology's wires (Topology.wires, named by the builder); a wire to an
undeclared port, a peer of the wrong kind or a required port left open is an InputError
before anything runs.

Internal command API (used by both front ends through kernbench.common):
    sim = Simulator(topology)
    ev = sim.submit(pe, cmd)        # PeCommand to a PE's PE_CPU; ev fires at completion
    sim.run()                       # raises DeadlockError if work is left pending
    done = sim.run_program(entries) # a Control-FSM program on the cube's M_CPU

Time is in ns. A run that ends with commands submitted but not complete is a deadlock:
the error names the pending commands and the queues holding or blocking them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import simpy

from kernbench.common.gc_pause import gc_paused
from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import TileToken
from kernbench.components.actions import ActionLedger
from kernbench.components.base import ComponentBase, PeEngineBase
from kernbench.components.counters import (
    EngineCounters,
    HardwareCounters,
    ServerCounters,
)
from kernbench.components.environment import GrantingEnvironment
from kernbench.components.fabric import Server
from kernbench.components.ports import OpLogSink
from kernbench.components.registry import lookup
from kernbench.errors import AddressError, DeadlockError, InputError
from kernbench.sim_engine.tracer import Tracer
from kernbench.topology.model import Pe, Topology, link_id


class Simulator:
    """One simulated system built from a Topology (implements components.ports.SimContext)."""

    def __init__(self, topology: Topology, *, op_logger: OpLogSink | None = None, trace: bool = True,
                 per_command: bool = True) -> None:
        """`per_command` False: energy counts are kept per layer (`cmd.meta["layer_id"]`),
        not per command, for runs that keep no per-command record (host memory stays
        bounded by the layers, not the commands)."""
        self.topology = topology
        # same-instant reservations are granted oldest command first (components.arbiter)
        self.env = GrantingEnvironment()
        self.arbiter = self.env.arbiter
        self.tracer = Tracer(trace)
        self.op_logger = op_logger
        self.components: dict[str, ComponentBase] = {}
        self.servers: dict[str, Server] = {}
        #: link id → its command virtual channel (m_cpu.command_vc)
        self.command_vcs: dict[str, Server] = {}
        self.pending: dict[int, PeCommand] = {}
        self.completed = 0
        self._seq = 0
        self._path_cache: dict[tuple, Any] = {}
        self._request_ns: dict[tuple[int, int], float] = {}
        # energy-relevant action counts, recorded by the engines beside their timing
        self.actions = ActionLedger({lid: k.kind for lid, k in topology.links.items()}, trace,
                                    "seq" if per_command else "layer_id")
        for lid, link in topology.links.items():
            if link.kind == "ucie":
                u = topology.config.sip.ucie
                cls = lookup(u.kind, u.impl, "sip.ucie")
                self.servers[lid] = cls(lid, link.latency_ns, link.bw_gbs)
            elif link.kind == "chip_link":
                cl = topology.config.system.link  # type: ignore[union-attr]
                cls = lookup(cl.kind, cl.impl, "system.link")
                make = getattr(cls, "from_spec", None)
                self.servers[lid] = (cls(lid, link.latency_ns, link.bw_gbs) if make is None
                                     else make(lid, link.latency_ns, link.bw_gbs, cl))
            else:
                self.servers[lid] = Server(lid, link.latency_ns, link.bw_gbs)
        for nid, node in topology.nodes.items():
            cls = lookup(node.kind, node.impl, nid)
            self.components[nid] = cls(node, self)
        self._bind(topology)
        for comp in self.components.values():
            comp.connect()
        for comp in self.components.values():
            comp.start()

    def _bind(self, topology: Topology) -> None:
        """Bind every wire to its two components, check every required port, and resolve
        the entry points the simulator itself uses (PE_CPUs, M_CPUs, memories, TCMs)."""
        comps = self.components
        for w in topology.wires:
            src, dst = comps.get(w.src), comps.get(w.dst)
            if src is None or dst is None:
                raise InputError(f"port '{w.port}' is wired to {w.dst}, but no node "
                                 f"'{w.src if src is None else w.dst}' exists", where=w.src)
            src.bind(w.port, dst)
        for comp in comps.values():
            comp.check_ports()
        # the blocks' own methods are called on these (PE_CPU's submit, a TCM's port, ...)
        self._pe_cpu: list[Any] = [comps[p.cpu] for p in topology.pes]
        self._tcm: list[Any] = [comps[p.tcm] for p in topology.pes]
        self._m_cpu: list[Any] = [comps[c.m_cpu] for c in topology.cubes]
        self._hbm: list[Any] = [comps[c.hbm_ctrl] for c in topology.cubes]
        self._sram: list[Any] = [comps[c.sram] if c.sram else None for c in topology.cubes]

    def pe_tcm(self, pe: int | str | Pe) -> ComponentBase:
        """The PE_TCM component of a PE (its allocator serves the kernel front end)."""
        p = pe if isinstance(pe, Pe) else self.topology.pe(pe)
        return self._tcm[p.index]

    # ------------------------------------------------------------ command API
    def submit(self, pe: int | str | Pe, cmd: PeCommand) -> simpy.Event:
        """Hand `cmd` to a PE's PE_CPU now; returns the command's completion event."""
        p = pe if isinstance(pe, Pe) else self.topology.pe(pe)
        if cmd.done is None:
            cmd.done = self.env.event()
        self._track(cmd)
        cmd.meta["pe_id"] = p.id
        cmd.submit_ns = self.env.now
        self._pe_cpu[p.index].submit(cmd)
        return cmd.done

    def _track(self, cmd: PeCommand) -> None:
        self._seq += 1
        cmd.meta["seq"] = self._seq
        self.pending[self._seq] = cmd

    def run_program(self, entries: Sequence[ProgramEntry], cube: int = 0) -> simpy.Event:
        """Run a Control-FSM program on cube `cube`'s M_CPU; returns its end event. A
        program that builds its entries as they are fetched (it has `on_build`) has each
        command tracked when it is built; a list has them all tracked now.

        A program whose commands go to PEs of several chips runs on every such chip's
        M_CPU (the one at `cube`'s place in its chip), each fetching and issuing its own
        chip's entries through its own window (components.builtin.m_cpu); the
        event fires at END, once they have all finished."""
        on_build = getattr(entries, "on_build", None)
        if on_build is not None:
            on_build(self._track_entry)
        else:
            for e in entries:
                self._track_entry(e)
        split = self._chip_split(entries)
        if split is None:
            return self._m_cpu[cube].run_program(entries)
        owner, orders, end = split
        per_chip = len(self.topology.cubes) // self.topology.chips
        m_cpus = [self._m_cpu[c * per_chip + cube % per_chip] for c in range(len(orders))]
        board = m_cpus[0].board(entries, owner)
        dones = [m.run_program(entries, board, order)
                 for m, order in zip(m_cpus, orders, strict=True) if order]
        done = self.env.event()

        def finished(_ev: object) -> None:
            now = self.env.now
            if end is not None:
                e = entries[end]
                e.fetch_ns = e.issue_ns = e.start_ns = e.end_ns = now
                board.complete[end] = 1
                board.done(e)
            done.succeed(now)

        self.env.all_of(dones).callbacks.append(finished)
        return done

    def _chip_split(self, entries: Sequence[ProgramEntry]
                    ) -> tuple[bytes, list[list[int]], int | None] | None:  # fmt: skip
        """(each entry's chip, each chip's entry ids in program order, END's id or None)
        for a program whose commands go to more than one chip; None otherwise (one chip,
        or a program whose entries stream in and cannot be read ahead). Entries after END
        are never fetched; control entries (BARRIER, NOP) are the first chip's."""
        topo = self.topology
        if topo.chips == 1:
            return None
        pes_of = getattr(entries, "entry_pes", None)
        pes = pes_of() if pes_of is not None else [
            e.pe if e.kind == "command" else e.kind for e in entries]
        if pes is None:
            return None
        chip_of = [p.cube.sip for p in topo.pes]
        owner = bytearray(len(pes))
        orders: list[list[int]] = [[] for _ in range(topo.chips)]
        end = None
        for i, pe in enumerate(pes):
            if pe == "end":
                end = i
                break
            c = chip_of[pe] if isinstance(pe, int) else 0
            owner[i] = c
            orders[c].append(i)
        if sum(1 for o in orders if o) < 2:
            return None
        return bytes(owner), orders, end

    def _track_entry(self, e: ProgramEntry) -> None:
        if e.command is not None:
            self._track(e.command)

    def command_complete(self, cmd: PeCommand, now: float) -> None:
        """Called by PE_SCHEDULER when a command's completion record is published."""
        cmd.end_ns = now
        self.pending.pop(cmd.meta.get("seq", -1), None)
        self.completed += 1
        if not cmd.done.triggered:
            cmd.done.succeed(now)

    def tile_done(self, token: TileToken, now: float) -> None:
        """Called by the last engine of a tile's plan (exactly once per tile)."""
        ctx = token.pipeline_ctx
        tracer = self.tracer
        if tracer.enabled:
            tracer.events.append((now, "tile_ready", token.plan.stages[-1].component,
                                  token.label, token.tile_id))
        if token.plan.staging_bytes:
            ctx.owner.release_staging(token.plan)
        ctx.complete_tile()

    # ------------------------------------------------------------ counters
    def counters(self) -> HardwareCounters:
        """A typed snapshot of every engine, link and memory counter (sorted by id)."""
        comps = [self.components[cid] for cid in sorted(self.components)]
        engines = tuple(
            EngineCounters(c.id, c.KIND, c.busy_ns, dict(c.channel_busy_ns), c.ops,
                           dict(c.stats()))
            for c in comps if isinstance(c, PeEngineBase)
        )
        links = tuple(ServerCounters(lid, s.bytes, s.busy_ns)
                      for lid, s in sorted(self.servers.items()))
        links += tuple(ServerCounters(f"{lid}#command_vc", s.bytes, s.busy_ns)
                       for lid, s in sorted(self.command_vcs.items()))
        memories = tuple(m for m in (c.memory_counters() for c in comps) if m is not None)
        return HardwareCounters(self.topology.name,
                                self.topology.config.cube.pe_template.pe_gemm.clock_ghz,
                                self.completed, engines, links, memories)

    # ------------------------------------------------------------ running
    def run(self, until: float | simpy.Event | None = None) -> float:
        """Run to completion (or `until`); raise DeadlockError if commands are left pending.
        The cyclic collector is paused meanwhile (common.gc_pause): the run's events and
        reservations are freed by reference counting, and a collection would rescan every
        command the program holds to free next to nothing."""
        with gc_paused():
            self.env.run(until=until) if until is not None else self.env.run()
        if until is None and self.pending:
            raise DeadlockError(self.deadlock_report())
        return self.env.now

    def deadlock_report(self) -> str:
        cmds = [c.label or f"command#{s}" for s, c in sorted(self.pending.items())]
        queues = []
        for cid in sorted(self.components):
            comp = self.components[cid]
            boxes: dict[str, Any] = {}
            if isinstance(comp, PeEngineBase):
                boxes = comp.inboxes
            elif hasattr(comp, "inbox"):
                boxes = {"inbox": comp.inbox}
            for ch, box in boxes.items():
                held = len(box.items)
                blocked = len(box.put_queue)
                if held or blocked:
                    labels = sorted({getattr(t, "label", "?") for t in box.items})
                    queues.append(
                        f"{cid}.{ch} holds {held}/{box.capacity}"
                        + (f" with {blocked} blocked put(s)" if blocked else "")
                        + (f" [{', '.join(labels[:3])}]" if labels else "")
                    )
        shown = ", ".join(cmds[:8]) + (f" (+{len(cmds) - 8} more)" if len(cmds) > 8 else "")
        return (
            f"deadlock at t={self.env.now:g} ns: {len(cmds)} command(s) pending: {shown}; "
            f"queues: {'; '.join(queues) or 'none hold work (a command waits on an event that never fires)'}"
        )

    # ------------------------------------------------------------ fabric paths
    def _links(self, ids: tuple[str, ...]) -> list[Server]:
        return [self.servers[i] for i in ids]

    def dma_stages(self, pe: Pe, space: str, addr: int, nbytes: int, write: bool,
                   what: str) -> list[Any]:
        """Stages of a DMA between `pe`'s TCM and HBM / SRAM at `addr` (reads: memory first)."""
        topo = self.topology
        if space == "hbm":
            try:
                cube = topo.cube_of_hbm(addr)
            except KeyError:
                raise AddressError(
                    f"{what}: HBM address {addr:#x} beyond the {topo.hbm_bytes:#x}-byte HBM"
                ) from None
            mem = self._hbm[cube.index]
            if topo.config.cube.hbm_ctrl.channel_routers is not None:
                return self._banked_stages(pe, cube, mem, addr, nbytes, write, what)
            key = ("hbm", pe.index, cube.index, write)
            links = self._path_cache.get(key)
            if links is None:
                hr = topo.hbm_router_for(pe.router, cube)
                links = tuple(self._links(topo.memory_path(pe, mem.id, hr, write)))
                self._path_cache[key] = links
        elif space == "sram":
            holder = next((c for c in topo.cubes
                           if c.sram_base <= addr < c.sram_base + c.sram_bytes), None)
            if holder is None:
                raise AddressError(f"{what}: SRAM address {addr:#x} is not in any shared SRAM")
            mem = self._sram[holder.index]
            key = ("sram", pe.index, holder.index, write)
            links = self._path_cache.get(key)
            if links is None:
                links = tuple(self._links(topo.memory_path(pe, holder.sram, holder.sram_router,
                                                           write)))
                self._path_cache[key] = links
        else:
            raise AddressError(f"{what}: unknown memory space '{space}'")
        tcm = self._tcm[pe.index].port
        mstage = mem.stage(addr, nbytes, what)
        if write:
            return [tcm, *links, mstage]
        return [mstage, *links, tcm]

    def read_request_ns(self, pe: Pe, space: str, addr: int) -> float:
        """A read of another chip's HBM sends its request over the chip links first (the
        data's own trip is in `dma_stages`): the sum of their latencies; 0 on-chip."""
        topo = self.topology
        if space != "hbm" or topo.config.system is None:
            return 0.0
        try:
            cube = topo.cube_of_hbm(addr)
        except KeyError:
            return 0.0  # dma_stages reports the bad address
        if cube.sip == pe.cube.sip:
            return 0.0
        key = (pe.index, cube.index)
        hit = self._request_ns.get(key)
        if hit is None:
            hr = topo.hbm_router_for(pe.router, cube)
            hit = self._request_ns[key] = sum(
                topo.links[lid].latency_ns for lid in topo.memory_path(pe, cube.hbm_ctrl, hr, True)
                if topo.links[lid].kind == "chip_link")
        return hit

    def _banked_stages(self, pe: Pe, cube: Any, mem: Any, addr: int, nbytes: int,
                       write: bool, what: str) -> list[Any]:
        """Stages of an HBM DMA whose channels have their own ports: the
        channels' shares as one stage (`HbmCtrl.banked_stage`), then / after the TCM port."""
        key = ("banked", pe.index, cube.index, write)
        links = self._path_cache.get(key)
        if links is None:
            topo = self.topology
            links = self._path_cache[key] = [
                tuple(self._links(topo.channel_path(pe, cube, i, write)))
                for i in range(topo.config.cube.hbm_ctrl.channels)]
        tcm = self._tcm[pe.index].port
        mstage = mem.banked_stage(addr, nbytes, write, pe.index, links, what)
        return [tcm, mstage] if write else [mstage, tcm]

    def mcast_stages(self, pe: Pe, dst_pes: list[int], nbytes: int) -> list[Any]:
        """Stages of a copy from `pe`'s TCM into the TCMs of `dst_pes` (PE indices): the
        source TCM port, its injection link, the union of the XY routes to the
        destinations in route order (a shared link carries the bytes once), then each
        destination's ejection link and TCM port."""
        key = ("mcast", pe.index, tuple(dst_pes))
        hit = self._path_cache.get(key)
        if hit is None:
            topo = self.topology
            ids: dict[str, None] = {}
            tails: list[Any] = []
            for d in dst_pes:
                dpe = topo.pes[d]
                if dpe.index == pe.index:
                    tails.append(self._tcm[d].port)
                    continue
                for link in (link_id(pe.id, pe.router), *topo.route(pe.router, dpe.router)):
                    ids[link] = None
                tails += [self.servers[link_id(dpe.router, dpe.id)], self._tcm[d].port]
            hit = self._path_cache[key] = (self._tcm[pe.index].port, *self._links(tuple(ids)),
                                           *tails)
        return list(hit)

    def command_path(self, cube_id: str, pe: Pe, to_pe: bool) -> tuple[Server, ...]:
        """Links between a cube's M_CPU and a PE's PE_CPU (command out, completion back)."""
        key = ("cmd", cube_id, pe.index, to_pe)
        hit = self._path_cache.get(key)
        if hit is not None:
            return hit
        topo = self.topology
        ids = topo.command_path(topo.cube(cube_id), pe, to_pe)
        if topo.config.cube.m_cpu.command_vc:
            path = tuple(self._command_vc(i) for i in ids)
        else:
            path = tuple(self._links(ids))
        self._path_cache[key] = path
        return path

    def _command_vc(self, lid: str) -> Server:
        """Link `lid`'s command virtual channel: a server of the link's latency
        and bandwidth that only command and completion packets reserve (its id is the
        link's, so the action ledger counts its bytes on that link)."""
        vc = self.command_vcs.get(lid)
        if vc is None:
            link = self.topology.links[lid]
            vc = self.command_vcs[lid] = Server(lid, link.latency_ns, link.bw_gbs)
        return vc
