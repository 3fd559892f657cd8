"""The multi-chip program of an expert-parallel run (docs/multichip.md): every rank's compiled
program, with the all-to-all-v dispatch and combine (and, in slice mode, the output
all-gather) in place of their placeholder nodes.

It is `tp_program`'s merge with another collective: the ranks' programs differ (each rank
computes its own experts on the rows routed to them), so a site's buffers sit at other
offsets on every rank, and the transfer sizes differ per pair of ranks
(`compiler.collectives.alltoallv`). A rank's entries after a site wait for the whole
collective of its group, its pulls from other chips and theirs from it: an all-to-all's
receive buffers are complete only when every rank has sent, and a rank's send buffer may
be reused only after every rank has read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives.alltoallv import lower_all_to_all_v
from kernbench.compiler.collectives.plan import DTYPE_BYTES
from kernbench.compiler.parallel.ep_graph import EpSite
from kernbench.compiler.parallel.tp_program import ALIGN, MergedProgram, _Merger
from kernbench.errors import InputError
from kernbench.topology.model import Topology

#: barrier-flag regions the collectives rotate through
FLAG_REGIONS = 3


@dataclass(frozen=True)
class EpSiteBuffers:
    """A site with its buffers' offsets (from each chip's HBM base) on every rank, in
    the order of the merged programs, and the element dtype."""

    site: EpSite
    src: tuple[int, ...]
    dst: tuple[int, ...]
    dtype: str


class _EpMerger(_Merger):
    def _lower(self, k: int, group: list[int], ranks: list[int], stores: list[list[int]],
               mine: list[list[int]]) -> None:
        s = self.sites[k]
        assert isinstance(s, EpSiteBuffers)
        flags = self.scratch_base + (k % FLAG_REGIONS) * ALIGN
        chips = [self.chips[r] for r in ranks]
        after = {self.chips[r]: sorted(self.sinks[r]) for r in ranks}
        splits = [[v * s.site.row for v in row] for row in s.site.splits]
        entries = lower_all_to_all_v(
            splits, chips, self.topo, self.limits,
            src=[self.bases[c] + s.src[r] for c, r in zip(chips, ranks, strict=True)],
            dst=[self.bases[c] + s.dst[r] for c, r in zip(chips, ranks, strict=True)],
            flags=flags, dtype=s.dtype, first_id=len(self.out), after=after,
            broadcast=s.site.op == "all_gather")
        rank_of = {c: r for c, r in zip(chips, ranks, strict=True)}
        eb = DTYPE_BYTES[s.dtype]
        for e in entries:
            e["layer_id"] = s.site.node
            r = rank_of[self.topo.chip_of(self.topo.pe(e["pe"]))]
            lo = self.bases[self.chips[r]] + s.dst[r]
            rows = sum(row[ranks.index(r)] for row in s.site.splits)
            hi = lo + rows * s.site.row * eb
            if e["opcode"] == "DMA_STORE_TILE" and lo <= e["dram_addr"] < hi:
                stores[r].append(e["id"])
        ids = [e["id"] for e in entries]
        for r in ranks:
            mine[r].extend(ids)
        self.out.extend(entries)
        self.collective_entries += len(entries)


def merge_ep_programs(programs: Sequence[list[dict]], sites: Sequence[EpSiteBuffers],
                      topo: Topology, groups: Sequence[Sequence[int]], limits: CmdqLimits,
                      scratch_base: int, aliases: dict[str, int] | None = None
                      ) -> MergedProgram:  # fmt: skip
    """The multi-chip program: `programs[r]` (compiled for chip 0, END last) runs on the
    r-th chip of `groups` in order (a group: one expert-parallel replica's chips, its
    ranks in order); every site is an all-to-all-v (or all-gather) within each group;
    the barrier flags sit at `scratch_base` (an offset from each chip's HBM base).
    `aliases` names the sites by other layer ids too (the ranks' own names of a site)."""
    per_chip = topo.hbm_bytes // topo.chips
    need = scratch_base + FLAG_REGIONS * ALIGN
    if need > per_chip:
        raise InputError(f"the expert-parallel program needs {need} bytes of HBM per chip; "
                         f"'{topo.name}' has {per_chip}", field="--ep")
    merger = _EpMerger(programs, sites, topo, groups, limits, scratch_base)  # type: ignore[arg-type]
    merger.site_of.update(aliases or {})
    return merger.run()
