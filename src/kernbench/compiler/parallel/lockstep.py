"""The multi-chip program of ranks whose programs are one program (a shape-only model's
tensor-parallel ranks), produced chunk by chunk while rank 0's program streams in.

`merge_programs` holds every rank's program and the merged one. When the ranks run the
same program (each on its own chip), its one-by-one interleave is a fixed layout: entry o
of the rank program (neither END nor a collective site's copy entry) becomes one entry per
rank, rank r's at base(o) + r, and the collectives of site k (one per group) stand in place
of the site's copy entries when the ranks reach its first one. `LockstepMerge` computes
that layout from the rank program's layers (their order and entry counts, known before the
program is produced: `compiler.stream`'s survey), so the merged program's length, its
entries per layer and the chip of every entry are known in advance; `chunks` turns the
rank program's chunks into the merged program's, entry for entry the ones `merge_programs`
emits for the same program on every rank (the same ids, dependencies, fences, remapping
and END). What it holds: one int per rank entry (its base), each rank's live sinks, the
chunk in hand.

The rank program must follow the layout: its entries in id order, no BARRIER or NOP, each
site's copy entries contiguous where its layer's count puts them. Anything else is a
RuntimeError (the compiler's stream and its survey disagree: a bug).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives import Buffers, Collective, lower_collective
from kernbench.compiler.collectives.plan import DTYPE_BYTES
from kernbench.compiler.parallel.tp_program import (
    ALIGN,
    SCRATCH_REGIONS,
    SiteBuffers,
    _align,
    _remap,
    check_scratch,
)
from kernbench.topology.model import Topology

#: a rank entry not produced yet (its base is unknown)
_UNSEEN = -(1 << 62)
#: merged entries per chunk handed on (the chips' command processors read them in order)
CHUNK = 4096


@dataclass(frozen=True)
class RankShape:
    """What is known of the rank program before it is produced: its entries (END
    included), the layers in the order their entries come, and each layer's entries."""

    entries: int
    layer_order: Sequence[str]
    layer_entries: Mapping[str, int]


class _Stream:
    """What `LockstepMerge.chunks` keeps while it runs: each rank entry's base (its merged
    id on rank 0; -1 - k for a copy entry of site k), every rank's live sinks, the fence of
    the last collective and the merged id it starts applying from, each site's per-rank
    output stores, the merged entries handed on."""

    def __init__(self, ranks: int, entries: int) -> None:
        self.base = array("q", [_UNSEEN]) * entries
        self.sinks: list[dict[int, None]] = [{} for _ in range(ranks)]
        self.fence: list[list[int]] = [[] for _ in range(ranks)]
        self.fence_from = 0
        self.stores: list[list[list[int]]] = []
        self.done = 0

    def ids_of(self, d: int, r: int, o: int) -> list[int]:
        """Rank r's merged ids for rank entry `d` (a dependency of rank entry `o`)."""
        b = self.base[d]
        if b == _UNSEEN:
            raise RuntimeError(f"lockstep merge: rank entry {o} depends on {d}, not "
                               "produced before it")
        return [b + r] if b >= 0 else self.stores[-1 - b][r]


class LockstepMerge:
    """The merged program of `groups` (each group's chips its tensor-parallel ranks in
    order, `merge_programs`'s `groups`) every chip of which runs the one rank program
    `shape` describes; `sites` the collective sites, run within every group, scratch from
    `scratch_base` (as `merge_programs`). Read `entries`, `layer_entries`,
    `collective_entries` and `entry_pes()` before `chunks`."""

    def __init__(self, shape: RankShape, sites: Sequence[SiteBuffers], topo: Topology,
                 groups: Sequence[Sequence[int]], limits: CmdqLimits,
                 scratch_base: int) -> None:
        check_scratch(topo, sites, scratch_base)
        self.shape = shape
        self.sites = list(sites)
        self.topo, self.limits, self.scratch_base = topo, limits, scratch_base
        self.groups = [list(g) for g in groups]
        self.chips = [c for g in self.groups for c in g]
        self.per_chip_pes = len(topo.pes) // topo.chips
        per_chip_cubes = len(topo.cubes) // topo.chips
        self.bases = [topo.cubes[c * per_chip_cubes].hbm_base for c in range(topo.chips)]
        # what `_remap` moves a rank's entries by: its chip's PEs, HBM base, SIP
        self.offs = [(c * self.per_chip_pes, self.bases[c], c) for c in self.chips]
        site_of = {s.site.node: k for k, s in enumerate(self.sites)}
        self.site_nodes = set(site_of)
        # each site's first entry in the rank program, and its entries
        self.site_at: dict[int, int] = {}
        self.site_len: list[int] = [0] * len(self.sites)
        pos = 0
        for lid in shape.layer_order:
            k = site_of.get(lid)
            count = shape.layer_entries.get(lid, 0)
            if k is not None and count:
                self.site_at[pos] = k
                self.site_len[k] = count
            pos += count
        if pos + 1 != shape.entries:
            raise RuntimeError(f"lockstep merge: the rank program's layers hold {pos} "
                               f"entries, its END makes {shape.entries}")
        if len(self.site_at) != len(self.sites):
            raise RuntimeError("lockstep merge: a collective site has no entries in the "
                               "rank program")
        # each site's collectives (all groups) as they will be lowered: their chips' PEs
        self.site_pes = [self._site_pes(k) for k in range(len(self.sites))]
        self.collective_entries = sum(len(p) for p in self.site_pes)
        normal = shape.entries - 1 - sum(self.site_len)
        self.entries = len(self.chips) * normal + self.collective_entries + 1
        layer: dict[str, int] = {}
        for lid in shape.layer_order:
            k = site_of.get(lid)
            count = len(self.site_pes[k]) if k is not None else \
                len(self.chips) * shape.layer_entries.get(lid, 0)
            if count:
                layer[lid] = count
        self.layer_entries = layer

    # ------------------------------------------------------------ the layout
    def _lowered(self, k: int, group: list[int], first_id: int,
                 after: dict[int, list[int]]) -> list[dict[str, Any]]:  # fmt: skip
        s = self.sites[k]
        region = _align(2 * max(x.count * DTYPE_BYTES[x.dtype] for x in self.sites)) + ALIGN
        scratch = self.scratch_base + (k % SCRATCH_REGIONS) * region
        c = Collective(s.site.op, s.count, tuple(group), "ring", s.dtype)
        prog = lower_collective(c, self.topo, self.limits,
                                buffers=Buffers(inp=s.src, out=s.dst, scratch=scratch,
                                                flags=scratch + region - ALIGN),
                                first_id=first_id, after=after, end=False)
        return prog.doc["cmdq"]

    def _site_pes(self, k: int) -> list[int]:
        topo = self.topo
        return [topo.pe(e["pe"]).index for g in self.groups
                for e in self._lowered(k, g, 0, {})]

    def entry_pes(self) -> list[int | str]:
        """Every merged entry's PE as `Simulator` splits a program over the chips' command
        processors: a collective entry's own PE; a rank entry's is known only once
        produced, so it is given as the first PE of its rank's chip (the split reads the
        chip only); "end" for END."""
        first = [c * self.per_chip_pes for c in self.chips]
        out: list[int | str] = []
        run = 0
        o = 0
        while o < self.shape.entries - 1:
            k = self.site_at.get(o)
            if k is None:
                run += 1
                o += 1
                continue
            out.extend(first * run)
            run = 0
            out.extend(self.site_pes[k])
            o += self.site_len[k]
        out.extend(first * run)
        out.append("end")
        return out

    # ------------------------------------------------------------ the entries
    def chunks(self, rank_chunks: Iterator[list[dict[str, Any]]]
               ) -> Iterator[list[dict[str, Any]]]:  # fmt: skip
        """The merged program's entries (END last), in chunks of at most about `CHUNK`,
        from the rank program's chunks (ids 0.., END last)."""
        shape = self.shape
        st = _Stream(len(self.chips), shape.entries)
        out: list[dict[str, Any]] = []
        site_left = 0   # copy entries of the current site still to come
        site = ""
        o = 0
        for chunk in rank_chunks:
            for e in chunk:
                if e["id"] != o:
                    raise RuntimeError(f"lockstep merge: rank entry {e['id']} at index {o}")
                op = e["opcode"]
                if op == "END":
                    if o != shape.entries - 1:
                        raise RuntimeError(f"lockstep merge: END at {o} of {shape.entries}")
                    o += 1
                    continue
                if op in ("BARRIER", "NOP"):
                    raise RuntimeError(f"lockstep merge: rank entry {o} is a {op}")
                k = self.site_at.get(o)
                if k is not None:
                    site, site_left = self.sites[k].site.node, self.site_len[k]
                    st.fence_from = self._collective(k, st.done + len(out), out, st)
                if site_left:
                    if e.get("layer_id") != site:
                        raise RuntimeError(f"lockstep merge: rank entry {o} "
                                           f"({e.get('layer_id')}) inside the copy entries "
                                           f"of '{site}'")
                    st.base[o] = -len(st.stores)  # the last site done: -1 - its index
                    site_left -= 1
                elif e.get("layer_id") in self.site_nodes:
                    raise RuntimeError(f"lockstep merge: rank entry {o} of "
                                       f"'{e.get('layer_id')}' outside its site's place")
                else:
                    self._copies(st, e, o, out)
                o += 1
                if len(out) >= CHUNK:
                    st.done += len(out)
                    yield out
                    out = []
        if o != shape.entries:
            raise RuntimeError(f"lockstep merge: the rank program ended after {o} of "
                               f"{shape.entries} entries")
        ends = {d for s in st.sinks for d in s} | {d for f in st.fence for d in f}
        out.append({"opcode": "END", "id": st.done + len(out), "layer_id": None,
                    "deps_before": sorted(ends)})
        yield out

    def _copies(self, st: _Stream, e: dict[str, Any], o: int,
                out: list[dict[str, Any]]) -> None:
        """Rank entry `o` (`e`) once per rank into `out`, as `merge_programs` emits it:
        its dependencies on each rank's copies (a site's copy entries: the rank's
        collective stores), the fence of the last collective, moved to the rank's chip."""
        base, fence, fence_from = st.base, st.fence, st.fence_from
        first = st.done + len(out)
        base[o] = first
        dep_ids = e.get("deps_before", ())
        waits = e.get("wait_for")
        for r, off in enumerate(self.offs):
            deps: list[int] = []
            for d in dep_ids:
                b = base[d]
                if b >= 0:
                    deps.append(b + r)
                else:
                    deps.extend(st.ids_of(d, r, o))
            if fence[r] and all(d < fence_from for d in deps):
                deps.extend(fence[r])
            deps = sorted(set(deps))
            x = dict(e)
            x["id"] = first + r
            x["deps_before"] = deps
            if waits is not None:
                x["wait_for"] = sorted({y for d in waits for y in st.ids_of(d, r, o)})
            _remap(x, *off)
            out.append(x)
            live = st.sinks[r]
            for d in deps:
                live.pop(d, None)
            live[first + r] = None

    def _collective(self, k: int, first: int, out: list[dict[str, Any]], st: _Stream) -> int:
        """Site k's collectives (every group) into `out` from merged id `first`, as
        `merge_programs` places them; returns the merged id after them."""
        sinks, fence, stores = st.sinks, st.fence, st.stores
        if k != len(stores):
            raise RuntimeError(f"lockstep merge: site {k} reached after {len(stores)} sites")
        n = len(self.chips)
        topo = self.topo
        mine: list[list[int]] = [[] for _ in range(n)]
        got: list[list[int]] = [[] for _ in range(n)]
        s = self.sites[k]
        nbytes = s.count * DTYPE_BYTES[s.dtype]
        deps_of: dict[int, list[int]] = {}
        pes: list[int] = []
        r0 = 0
        for group in self.groups:
            ranks = range(r0, r0 + len(group))
            r0 += len(group)
            after = {self.chips[r]: sorted(sinks[r]) for r in ranks}
            entries = self._lowered(k, group, first, after)
            rank_of = {self.chips[r]: r for r in ranks}
            for e in entries:
                e["layer_id"] = s.site.node
                r = rank_of[topo.chip_of(topo.pe(e["pe"]))]
                mine[r].append(e["id"])
                lo = self.bases[self.chips[r]] + s.dst
                if e["opcode"] == "DMA_STORE_TILE" and lo <= e["dram_addr"] < lo + nbytes:
                    got[r].append(e["id"])
                deps_of[e["id"]] = e["deps_before"]
                pes.append(topo.pe(e["pe"]).index)
            out.extend(entries)
            first += len(entries)
        if pes != self.site_pes[k]:
            raise RuntimeError(f"lockstep merge: the collective of '{s.site.node}' moved "
                               "from the PEs the layout gave it")
        for r in range(n):
            # the fence: rank r's collective entries none of the others depends on
            used = {d for i in mine[r] for d in deps_of[i]}
            sinks[r] = dict.fromkeys(got[r])
            fence[r] = sorted(i for i in mine[r] if i not in used)
        stores.append(got)
        return first


__all__ = ["CHUNK", "LockstepMerge", "RankShape"]
