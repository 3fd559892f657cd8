"""Analytic cost model of a compiled program: per tile op its engine times, per layer an
estimate of the simulated time (docs/compiler.md "Cost model").

Input: the program as the Control FSM runs it (`ProgramEntry` list from
`cmdq.hw.to_program`, so every op is priced by the stages it really lowers to) and the
topology. Every figure comes from the topology's config through the engines' own formulas
(`gemm_cycles`, `math_cycles`, `wire_bytes`, `channel_shares`, `split_transfers`) and the
topology's links; nothing is a constant of this module.

Per op, uncontended:
- TE: systolic cycles / clock; VE: pe_math cycles / clock; FETCH / STORE: TCM latency +
  bytes / TCM bandwidth;
- DMA: setup + MMU + Σ latencies of the path (TCM port, PE link, mesh links, UCIe, the HBM
  port, the HBM controller) + wire bytes / the slowest stage; it also loads every link of
  the path (bytes / link bandwidth), the TCM port, and each HBM channel (its interleaved
  share / channel bandwidth) of the cube whose address range holds the address;
- the op's own run: its tiles' stages through its engines in order (a flow shop), plus the
  command's trip M_CPU → PE (`pre`) and the completion's trip back (`post`).

Per layer, on its own (the layer's ops; dependencies on other layers ignored):
    work = max( critical path of the ops (pre + run + post along `deps`),
                max over resources r of  head_r + busy_r + tail_r,  the levels )
busy_r is Σ of the layer's time on r (an engine channel of a PE, a link, an HBM channel,
the M_CPU's issue slot); head_r / tail_r are the shortest dependency path before the
first use of r and after its last use: the fixed latency a resource-bound layer cannot
hide. `estimate_by` names what sets it.

In the program: `cost_schedule.schedule` places every op on one timeline (a list schedule
over the simulator's reservation servers: queueing behind other PEs' transfers on shared
links and HBM channels, TCM staging, engine channels, dispatch). A layer's `estimate_ns`
is its span there (first op start → last op end, what stats.json `ns` measures) and its
`busy_ns` the longest union of its ops' intervals on one PE (stats.json `busy_ns`); the
end to end estimate is the last completion, never below the whole program's busiest
resource or its dependency chain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import LayerSpan, ProgramEntry, add_span
from kernbench.common.tile_plan import StageType
from kernbench.compiler.cost_schedule import schedule
from kernbench.components.builtin.hbm_ctrl import channel_shares
from kernbench.components.builtin.pe_dma import wire_bytes
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.components.builtin.pe_math import math_cycles, stage_cycles
from kernbench.components.builtin.pe_scheduler import split_transfers
from kernbench.topology.model import Pe, Topology

NAN = float("nan")
INF = float("inf")

#: (resource, busy ns, start offset in the op's run, end offset in the op's run)
Use = tuple[str, float, float, float]


@dataclass(frozen=True, slots=True)
class OpCost:
    """One op, uncontended: `pre` (M_CPU → first engine), `run` (first engine start →
    last engine end), `post` (completion back to the M_CPU) and its resource uses."""

    pre_ns: float
    run_ns: float
    post_ns: float
    uses: tuple[Use, ...]


@dataclass(slots=True)
class LayerEstimate:
    """A layer's estimate. On its own the layer costs `work_ns` = max(`path_ns` (its
    dependency chain), `resource_ns` (its busiest `resource` with head + busy + tail),
    `level_ns` (its dependency levels)). `first_ns` / `end_ns` place it on the program's
    estimated schedule; `estimate_ns` = end − first compares with the simulated span
    (`ns`), `busy_ns` (longest union of its ops' intervals on one PE) with `busy_ns`."""

    resource: str | None
    resource_ns: float
    path_ns: float
    level_ns: float
    ops: int
    first_ns: float = 0.0
    end_ns: float = 0.0
    busy_ns: float = 0.0

    @property
    def work_ns(self) -> float:
        """The layer's cost on its own (nothing else running)."""
        return max(self.path_ns, self.resource_ns, self.level_ns)

    @property
    def estimate_ns(self) -> float:
        """The estimated span: first op start to last op end on the timeline."""
        return self.end_ns - self.first_ns if self.end_ns > 0 else self.work_ns

    @property
    def bound_by(self) -> str:
        """What sets `work_ns`: "path" (the dependency chain), "levels" (dependency levels
        sharing resources) or the busiest resource's id."""
        # ties (a resource used once on the chain: head + busy + tail = path) go to the chain
        if self.resource_ns > max(self.path_ns, self.level_ns) * (1 + 1e-9):
            return str(self.resource)
        # a chain of one op per level has levels == path (up to float rounding): "path"
        return "path" if self.path_ns >= self.level_ns * (1 - 1e-9) else "levels"


@dataclass
class ProgramEstimate:
    """Per-layer estimates (layer id → LayerEstimate) and the end-to-end estimate."""

    layers: dict[str, LayerEstimate] = field(default_factory=dict)
    estimate_ns: float = 0.0


def _path_time(links: Iterable[tuple[float, float]], nbytes: int) -> float:
    """Uncontended cut-through time of `nbytes` over stages (latency, bandwidth):
    Σ latency + bytes / the slowest stage (components.fabric.transfer, no contention)."""
    lat, bw = 0.0, float("inf")
    for latency, b in links:
        lat += latency
        bw = min(bw, b)
    return lat + (nbytes / bw if bw != float("inf") else 0.0)


class CostModel:
    """Prices ops on one topology. Paths are cached per (PE, memory cube, direction)."""

    def __init__(self, topology: Topology) -> None:
        self.topo = topology
        pt = topology.config.cube.pe_template
        self.pt = pt
        self.hbm = topology.config.cube.hbm_ctrl
        self.mcpu = topology.config.cube.m_cpu
        self._paths: dict[tuple[Any, ...], tuple[tuple[str, float, float], ...]] = {}
        self._gemm: dict[tuple[int, int, int, int], float] = {}

    # ------------------------------------------------------------------ engine times
    def gemm_ns(self, m: int, n: int, k: int, bits: int) -> float:
        """pe_gemm busy ns of an (m, n, k) tile at `bits`-bit operands."""
        key = (m, n, k, bits)
        v = self._gemm.get(key)
        if v is None:
            g = self.pt.pe_gemm
            v = self._gemm[key] = gemm_cycles(g, m, n, k, bits) / g.clock_ghz
        return v

    def math_ns(self, op: str, length: int, rows: int = 1) -> float:
        """pe_math busy ns of `op` on rows × length elements (unknown op: KeyError)."""
        s = self.pt.pe_math
        return math_cycles(s, op, length, rows) / s.clock_ghz

    def tcm_ns(self, nbytes: int) -> float:
        """A fetch or store of `nbytes` over the TCM port: latency + bytes / bandwidth."""
        t = self.pt.pe_tcm
        return t.latency_ns + nbytes / t.bw_gbs if nbytes > 0 else 0.0

    # ------------------------------------------------------------------ paths
    def _links(self, ids: Iterable[str]) -> tuple[tuple[str, float, float], ...]:
        links = self.topo.links
        return tuple((i, links[i].latency_ns, links[i].bw_gbs) for i in ids)

    def memory_links(self, pe: Pe, space: str, addr: int,
                     write: bool) -> tuple[tuple[str, float, float], ...]:
        """(link id, latency, bandwidth) from `pe` to the memory holding `addr` (HBM:
        the cube whose address range holds it; SRAM: the cube's shared SRAM)."""
        topo = self.topo
        if space == "sram":
            cube = next(c for c in topo.cubes if c.sram_base <= addr < c.sram_base + c.sram_bytes)
            key: tuple[Any, ...] = ("sram", pe.index, cube.index, write)
            hit = self._paths.get(key)
            if hit is None:
                hit = self._paths[key] = self._links(
                    topo.memory_path(pe, cube.sram, cube.sram_router, write))
            return hit
        cube = topo.cube_of_hbm(addr)
        key = ("hbm", pe.index, cube.index, write)
        hit = self._paths.get(key)
        if hit is None:
            hr = topo.hbm_router_for(pe.router, cube)
            hit = self._paths[key] = self._links(
                topo.memory_path(pe, cube.hbm_ctrl, hr, write))
        return hit

    def command_links(self, pe: Pe, to_pe: bool) -> tuple[tuple[str, float, float], ...]:
        """Links between cube 0's M_CPU (the one that runs a program) and `pe`."""
        key = ("cmd", pe.index, to_pe)
        hit = self._paths.get(key)
        if hit is None:
            hit = self._paths[key] = self._links(
                self.topo.command_path(self.topo.cubes[0], pe, to_pe))
        return hit

    def dma(self, pe: Pe, params: dict[str, Any], write: bool) -> tuple[float, list[tuple[str, float]]]:
        """One DMA stage: (the DMA channel's busy ns, [(resource, busy ns)] it loads)."""
        d, t = self.pt.pe_dma, self.pt.pe_tcm
        nbytes = params.get("nbytes", 0)
        wire = wire_bytes(d.burst_bytes, nbytes, params.get("rows", 1))
        space = params.get("space", "hbm")
        addr = params.get("addr", 0)
        links = self.memory_links(pe, space, addr, write)
        loads = [(lid, wire / bw) for lid, _, bw in links]
        loads.append((f"{pe.tcm}.port", wire / t.bw_gbs))
        lat = sum(x for _, x, _ in links) + t.latency_ns
        ser = wire / min(min((bw for _, _, bw in links), default=t.bw_gbs), t.bw_gbs)
        if space == "hbm":
            cube = self.topo.cube_of_hbm(addr)
            shares = channel_shares(addr - cube.hbm_base, wire, self.hbm.interleave_bytes,
                                    self.hbm.channels)
            loads += [(f"{cube.hbm_ctrl}.ch{ch}", b / self.hbm.channel_bw_gbs)
                      for ch, b in shares]
            lat += self.hbm.latency_ns
            ser = max(ser, max((b for _, b in shares), default=0) / self.hbm.channel_bw_gbs)
        elif (s := self.topo.config.cube.shared_sram) is not None:
            # the SRAM's port link carries its latency; the array serialises at bw_gbs
            ser = max(ser, wire / s.bw_gbs)
        busy = d.setup_cycles / d.clock_ghz + self.pt.pe_mmu.translation_latency_ns + lat + ser
        return busy, loads

    # ------------------------------------------------------------------ one op
    def stage(self, pe: Pe, st: StageType, p: dict[str, Any]) -> tuple[str, float, list]:
        """(channel resource, busy ns, extra loads) of one stage on `pe`."""
        if st in (StageType.DMA_READ, StageType.DMA_WRITE):
            write = st == StageType.DMA_WRITE
            busy, loads = self.dma(pe, p, write)
            return f"{pe.id}.pe_dma.{'write' if write else 'read'}", busy, loads
        if st in (StageType.FETCH, StageType.STORE):
            nb = p.get("nbytes", 0)
            ch = "fetch" if st == StageType.FETCH else "store"
            busy = self.tcm_ns(nb)
            return f"{pe.id}.pe_fetch_store.{ch}", busy, [(f"{pe.tcm}.port", busy)]
        if st == StageType.GEMM:
            bits = max(p.get("qbits_weight", 8), p.get("qbits_activation", 8))
            te = p.get("te_id", 0)
            busy = p.get("groups", 1) * self.gemm_ns(p["m"], p["n"], p["k"], bits)
            return f"{pe.id}.pe_gemm{te or ''}", busy, []
        ve = p.get("ve_id", 0)
        s = self.pt.pe_math
        return f"{pe.id}.pe_math{ve or ''}", stage_cycles(s, p) / s.clock_ghz, []

    def op_cost(self, pe_index: int, cmd: PeCommand) -> OpCost:
        """The uncontended cost of one command on PE `pe_index` (see the module doc)."""
        pe = self.topo.pes[pe_index]
        pt = self.pt
        cmd_bytes = self.mcpu.command_bytes
        out = self.command_links(pe, True)
        back = self.command_links(pe, False)
        pre = (_path_time(((lat, bw) for _, lat, bw in out), cmd_bytes)
               + pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
               + pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz)
        post = _path_time(((lat, bw) for _, lat, bw in back), cmd_bytes)
        # the command packet loads the links before the run: no head or tail (NaN offsets)
        uses: list[Use] = [(lid, cmd_bytes / bw, NAN, NAN) for lid, _, bw in out]
        free: dict[str, float] = {}
        end = 0.0
        limit = pt.pe_scheduler.max_transfer_bytes
        for stages in cmd.tiles():  # a flow shop: tiles in order through their engines
            if limit:
                stages = split_transfers(stages, limit)
            t = 0.0
            for st, p in stages:
                res, busy, loads = self.stage(pe, st, p)
                s = max(t, free.get(res, 0.0))
                t = free[res] = s + busy
                uses.append((res, busy, s, t))
                uses += [(r, b, s, t) for r, b in loads]
            end = max(end, t)
        return OpCost(pre, end, post, tuple(uses))


def _layer_of(e: ProgramEntry) -> str | None:
    return e.command.meta.get("layer_id") if e.command is not None else None


def estimate_program(entries: list[ProgramEntry], topology: Topology) -> ProgramEstimate:
    """Per-layer and end-to-end estimates of a program (the module docstring's formulas).
    Entries without a layer (hand-written programs) count toward the end-to-end figure only."""
    model = CostModel(topology)
    issue_ns = model.mcpu.issue_latency_cycles / model.mcpu.clock_ghz
    costs: dict[int, OpCost] = {e.id: model.op_cost(e.pe, e.command)
                                for e in entries if e.command is not None}
    groups: dict[str | None, list[ProgramEntry]] = {}
    for e in entries:
        if e.id in costs:
            groups.setdefault(_layer_of(e), []).append(e)
    out = ProgramEstimate()
    for lid, ops in groups.items():
        if lid is not None:
            out.layers[lid] = _estimate_group(ops, costs, issue_ns)
    whole = _estimate_group([e for e in entries if e.id in costs], costs, issue_ns)
    placed = schedule(entries, topology, model)
    spans: dict[str, LayerSpan] = {}
    for e in entries:
        if e.id in placed:  # the same aggregation as the simulated spans (stats `layers`)
            add_span(spans, _layer_of(e), "", placed[e.id].start, placed[e.id].end, e.pe)
    for lid, sp in spans.items():
        le = out.layers[lid]
        le.first_ns, le.end_ns, le.busy_ns = sp.start_ns, sp.end_ns, sp.pe_busy_ns
    end = max((p.end for p in placed.values()), default=0.0)
    # the schedule respects every resource; the bounds guard what it leaves out
    out.estimate_ns = max(whole.resource_ns, whole.path_ns, end)
    return out


def _estimate_group(ops: list[ProgramEntry], costs: dict[int, OpCost],
                    issue_ns: float) -> LayerEstimate:
    """One group of ops (a layer) on its own: its critical path, its busiest resource with
    head and tail, and its levels (see `_levels`); only dependencies inside the group
    count."""
    ids = {e.id for e in ops}
    start: dict[int, float] = {}
    finish: dict[int, float] = {}
    succs: dict[int, list[int]] = {}
    for e in ops:  # ids are a topological order (deps name earlier entries)
        c = costs[e.id]
        s = 0.0
        for d in e.deps:
            if d in ids:
                s = max(s, finish[d] + c.pre_ns)
                succs.setdefault(d, []).append(e.id)
        start[e.id] = s
        finish[e.id] = s + c.run_ns + c.post_ns
    after: dict[int, float] = {}
    for e in reversed(ops):
        after[e.id] = max((costs[n].pre_ns + costs[n].run_ns + costs[n].post_ns + after[n]
                           for n in succs.get(e.id, ())), default=0.0)
    busy: dict[str, float] = {}
    head: dict[str, float] = {}
    tail: dict[str, float] = {}
    for e in ops:
        c = costs[e.id]
        rest = c.post_ns + after[e.id]
        for r, b, s, t in c.uses:
            busy[r] = busy.get(r, 0.0) + b
            if s != s:  # NaN: a command packet, outside the run
                head[r] = tail[r] = 0.0
                continue
            head[r] = min(head.get(r, INF), start[e.id] + s)
            tail[r] = min(tail.get(r, INF), c.run_ns - t + rest)
    best, best_ns = ("m_cpu.issue" if ops else None), len(ops) * issue_ns
    for r in sorted(busy):
        v = head[r] + busy[r] + tail[r]
        if v > best_ns:
            best, best_ns = r, v
    return LayerEstimate(best, best_ns, max(finish.values(), default=0.0),
                         _levels(ops, costs, ids), len(ops))


def _levels(ops: list[ProgramEntry], costs: dict[int, OpCost], ids: set[int]) -> float:
    """Σ over the dependency levels of `ops` (level = ops on the longest chain before it
    inside the group) of max(the level's longest op, the level's busiest resource): the
    ops of a level run together and share their resources, and a level waits for the one
    before. It is never below the critical path nor the busiest resource's busy time."""
    level: dict[int, int] = {}
    per: dict[int, tuple[list[float], dict[str, float]]] = {}
    for e in ops:
        lv = level[e.id] = max((level[d] + 1 for d in e.deps if d in level), default=0)
        c = costs[e.id]
        longest, busy = per.setdefault(lv, ([0.0], {}))
        # like the path, the first level starts at its first engine (no command trip in)
        longest[0] = max(longest[0], (c.pre_ns if lv else 0.0) + c.run_ns + c.post_ns)
        for r, b, _, _ in c.uses:
            busy[r] = busy.get(r, 0.0) + b
    return sum(max(lo[0], max(bu.values(), default=0.0)) for lo, bu in per.values())


__all__ = ["CostModel", "LayerEstimate", "OpCost", "ProgramEstimate", "estimate_program"]
