"""One multi-chip program from the ranks' compiled programs and the collectives between
them (docs/multichip.md).

Each rank's program was compiled for one chip (PE indices and HBM addresses of chip 0).
Rank r runs on chip `chips[r]`: its entries move to that chip (PE index + chip × PEs per
chip, `dram_addr` + the chip's HBM base) and take new ids. The ranks' entries are
interleaved one by one in program order (each chip's command processor fetches its own
chip's entries).

A collective site (`ParallelSite`) was compiled as a copy layer; its entries are dropped
and the collective's (`compiler.collectives.lower_collective`) take their place when
every rank has reached it:
- its moves on chip r wait for everything rank r issued before (the program's sinks so
  far): the collective's TCM slots may be any of the worker PEs' banks;
- rank r's later entries that depended on the copy depend on the collective's stores into
  rank r's output buffer, and every later entry of rank r that depends on nothing later
  waits for all the collective's entries on chip r (so nothing reuses a TCM slot of the
  collective while it runs);
- its scratch and barrier flags sit at the top of each chip's HBM, above everything the
  memory plan placed (`scratch_base`), in three rotating regions: a collective's entry
  barrier keeps the ranks within one collective of each other, so a region is never
  written while a neighbour still reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives import Buffers, Collective, lower_collective
from kernbench.compiler.collectives.plan import DTYPE_BYTES
from kernbench.compiler.parallel.tp_graph import ParallelSite
from kernbench.errors import InputError
from kernbench.topology.model import Topology

#: scratch regions the collectives rotate through (see the module docstring)
SCRATCH_REGIONS = 3
ALIGN = 4096


@dataclass(frozen=True)
class SiteBuffers:
    """Where a site's input and output live in every chip's HBM (offsets from the
    chip's base), their element count and dtype."""

    site: ParallelSite
    src: int
    dst: int
    count: int
    dtype: str


@dataclass
class MergedProgram:
    """The multi-chip entries (END last) and what the collectives added."""

    entries: list[dict[str, Any]]
    collective_entries: int = 0
    sites: list[str] = field(default_factory=list)


def _align(x: int) -> int:
    return -(-x // ALIGN) * ALIGN


def scratch_need(sites: Sequence[SiteBuffers]) -> int:
    """Bytes per chip the collectives' scratch and flags take at the top of HBM."""
    if not sites:
        return 0
    big = max(s.count * DTYPE_BYTES[s.dtype] for s in sites)
    return SCRATCH_REGIONS * (_align(2 * big) + ALIGN)


def _remap(e: dict[str, Any], pe_off: int, addr_off: int, chip: int) -> None:
    pe = e.get("pe")
    if isinstance(pe, int):
        e["pe"] = pe + pe_off
    elif isinstance(pe, str):
        e["pe"] = f"sip{chip}." + pe.split(".", 1)[1]
    elif pe is None and e.get("opcode") not in ("END", "BARRIER", "NOP"):
        e["pe"] = pe_off
    if "dram_addr" in e:
        e["dram_addr"] = e["dram_addr"] + addr_off
    if "dst_pes" in e:
        e["dst_pes"] = [p + pe_off for p in e["dst_pes"]]


class _Merger:
    def __init__(self, programs: Sequence[list[dict[str, Any]]], sites: Sequence[SiteBuffers],
                 topo: Topology, groups: Sequence[Sequence[int]], limits: CmdqLimits,
                 scratch_base: int) -> None:
        self.programs = programs
        self.sites = list(sites)
        self.site_of = {s.site.node: i for i, s in enumerate(self.sites)}
        self.groups = [list(g) for g in groups]
        self.topo, self.chips, self.limits = topo, [c for g in groups for c in g], limits
        self.scratch_base = scratch_base
        self.per_chip_pes = len(topo.pes) // topo.chips
        per_chip_cubes = len(topo.cubes) // topo.chips
        self.bases = [topo.cubes[c * per_chip_cubes].hbm_base for c in range(topo.chips)]
        self.out: list[dict[str, Any]] = []
        n = len(programs)
        self.ids: list[dict[int, list[int]]] = [{} for _ in range(n)]   # old id → new ids
        self.sinks: list[dict[int, None]] = [{} for _ in range(n)]      # per rank
        self.fence: list[list[int]] = [[] for _ in range(n)]            # last collective
        self.fence_from = [0] * n   # new ids below this are before the fence
        self.done_sites: dict[int, list[list[int]]] = {}  # site → per rank: its out stores
        self.collective_entries = 0

    def run(self) -> MergedProgram:
        n = len(self.programs)
        cur = [0] * n
        waiting: list[int | None] = [None] * n
        finished = [False] * n
        while not all(finished):
            progressed = False
            for r in range(n):
                if finished[r] or waiting[r] is not None:
                    continue
                prog = self.programs[r]
                while cur[r] < len(prog):
                    e = prog[cur[r]]
                    k = self.site_of.get(e.get("layer_id"))
                    if k is not None and k not in self.done_sites:
                        waiting[r] = k
                        break
                    cur[r] += 1
                    if e["opcode"] == "END":
                        continue
                    if k is not None:  # the site's copy entries: the collective stands in
                        self.ids[r][e["id"]] = self.done_sites[k][r]
                        continue
                    self.emit(r, e)
                    progressed = True
                    break
                else:
                    finished[r] = True
                    progressed = True
            if not progressed:
                ks = {w for w, f in zip(waiting, finished, strict=True) if not f}
                if len(ks) != 1 or None in ks:
                    raise ValueError(f"the ranks' programs reach collective sites in "
                                     f"different orders ({sorted(map(str, ks))})")
                k = ks.pop()
                assert k is not None
                self.collective(k)
                waiting = [None] * n
        ends = {d for s in self.sinks for d in s} | {d for f in self.fence for d in f}
        self.out.append({"opcode": "END", "id": len(self.out), "layer_id": None,
                         "deps_before": sorted(ends)})
        return MergedProgram(self.out, self.collective_entries,
                             [s.site.node for s in self.sites])

    def emit(self, r: int, e: dict[str, Any]) -> None:
        chip = self.chips[r]
        e = dict(e)
        new = len(self.out)
        old = e["id"]
        deps: list[int] = []
        for d in e.get("deps_before", ()):
            deps.extend(self.ids[r][d])
        if self.fence[r] and all(d < self.fence_from[r] for d in deps):
            deps.extend(self.fence[r])
        deps = sorted(set(deps))
        e["id"] = new
        e["deps_before"] = deps
        if "wait_for" in e:
            e["wait_for"] = sorted({x for d in e["wait_for"] for x in self.ids[r][d]})
        _remap(e, chip * self.per_chip_pes, self.bases[chip], chip)
        self.out.append(e)
        self.ids[r][old] = [new]
        for d in deps:
            self.sinks[r].pop(d, None)
        self.sinks[r][new] = None

    def collective(self, k: int) -> None:
        """Collective k in every group (ranks g·tp .. g·tp + tp − 1), in place of the
        site's copy entries."""
        n = len(self.chips)
        stores: list[list[int]] = [[] for _ in range(n)]
        mine: list[list[int]] = [[] for _ in range(n)]
        first = 0
        for group in self.groups:
            ranks = list(range(first, first + len(group)))
            first += len(group)
            self._lower(k, group, ranks, stores, mine)
        fence_from = len(self.out)
        for r in range(n):
            self.sinks[r] = dict.fromkeys(stores[r])
            self.fence[r] = _sinks_of(self.out, set(mine[r]))
            self.fence_from[r] = fence_from
        self.done_sites[k] = stores

    def _lower(self, k: int, group: list[int], ranks: list[int], stores: list[list[int]],
               mine: list[list[int]]) -> None:
        s = self.sites[k]
        eb = DTYPE_BYTES[s.dtype]
        region = _align(2 * max(x.count * DTYPE_BYTES[x.dtype] for x in self.sites)) + ALIGN
        scratch = self.scratch_base + (k % SCRATCH_REGIONS) * region
        flags = scratch + region - ALIGN
        c = Collective(s.site.op, s.count, tuple(group), "ring", s.dtype)
        after = {self.chips[r]: sorted(self.sinks[r]) for r in ranks}
        prog = lower_collective(c, self.topo, self.limits,
                                buffers=Buffers(inp=s.src, out=s.dst, scratch=scratch,
                                                flags=flags),
                                first_id=len(self.out), after=after, end=False)
        entries = prog.doc["cmdq"]
        rank_of = {self.chips[r]: r for r in ranks}
        nbytes = s.count * eb
        for e in entries:
            e["layer_id"] = s.site.node
            r = rank_of[self.topo.chip_of(self.topo.pe(e["pe"]))]
            mine[r].append(e["id"])
            lo = self.bases[self.chips[r]] + s.dst
            if e["opcode"] == "DMA_STORE_TILE" and lo <= e["dram_addr"] < lo + nbytes:
                stores[r].append(e["id"])
        self.out.extend(entries)
        self.collective_entries += len(entries)


def _sinks_of(entries: list[dict[str, Any]], ids: set[int]) -> list[int]:
    """The entries among `ids` (ids are positions in `entries`) no other entry among
    `ids` depends on."""
    used = {d for i in ids for d in entries[i]["deps_before"]}
    return sorted(i for i in ids if i not in used)


def check_scratch(topo: Topology, sites: Sequence[SiteBuffers], scratch_base: int) -> None:
    """The collectives' scratch from `scratch_base` fits every chip's HBM (else an
    InputError naming --tp)."""
    per_chip = topo.hbm_bytes // topo.chips
    if scratch_base + scratch_need(sites) > per_chip:
        raise InputError(f"the tensor-parallel program needs {scratch_base + scratch_need(sites)}"
                         f" bytes of HBM per chip; '{topo.name}' has {per_chip}",
                         field="--tp")


def merge_programs(programs: Sequence[list[dict[str, Any]]], sites: Sequence[SiteBuffers],
                   topo: Topology, groups: Sequence[Sequence[int]], limits: CmdqLimits,
                   scratch_base: int) -> MergedProgram:
    """The multi-chip program (see the module docstring): `groups` are the chips of each
    replica (data parallelism; one group without it), a group's chips its tensor-parallel
    ranks in order; `programs[r]` is the entries (compiled for chip 0, END last) of the
    r-th chip of the groups in order; `sites` the collective sites with their buffers,
    each run as a collective within every group; the collectives' scratch starts at
    `scratch_base` (an offset from each chip's HBM base)."""
    check_scratch(topo, sites, scratch_base)
    return _Merger(programs, sites, topo, groups, limits, scratch_base).run()
