"""One multi-chip program for a pipeline-parallel run (`--pp`, with `--tp` and `--dp`):
every stage's compiled program on its chips, once per micro-batch, joined by send/recv
between stages and the stages' own all-reduces (docs/multichip.md).

A `Lane` is one chip's work: the program of its (stage, tensor-parallel rank), compiled
for chip 0, run once per micro-batch (a segment). Its markers are:
- a tensor-parallel site (an all-reduce or all-gather within the stage's chips of the
  replica, as in `tp_program`);
- a receive site of the stage graph (`pp.recv.<tensor>`): a send/recv from the same
  tensor-parallel rank of the previous stage;
- the end of a segment of a stage that is not the last: its side of the send/recv of each
  tensor the next stage receives.
A marker's collective is lowered (`compiler.collectives.lower_collective`) when every
chip it involves has reached it; until then the chips that wait emit nothing and the
others go on. The chips' entries are interleaved one by one in the order they become
ready (each chip's command processor issues its own); a stage's layers depend on the
received activations, so in the simulation it sits idle until its first micro-batch
arrives (the pipeline bubble) while the stages before it work.

A send/recv has no entry barrier: its moves run on the receiving chip and already wait
for the sender's producers and the receiver's earlier entries (a receiver-driven pull:
the request crosses the links, then the data). Other dependencies follow `tp_program`: a collective's moves on a chip wait for everything
the chip issued before; the chip's later entries that depend on nothing later wait for
the collective's entries on that chip (the sending chip, which runs none of them, for
all of the collective's entries: its buffer may be overwritten after). A segment's
entries that depend on nothing in the segment wait for the chip's previous segment, so
a chip runs its micro-batches one after another. With more than one micro-batch the
layer ids carry `@mb<m>`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives import Buffers, Collective, lower_collective
from kernbench.compiler.parallel.tp_program import (
    ALIGN,
    SCRATCH_REGIONS,
    MergedProgram,
    SiteBuffers,
    _align,
    _remap,
    _sinks_of,
)
from kernbench.errors import InputError
from kernbench.topology.model import Topology

#: bytes per element of what a send/recv may move (a copy: any width moves as bytes)
_ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1, "uint8": 1, "int16": 2,
               "int32": 4}


@dataclass(frozen=True)
class Transfer:
    """A send/recv of `tensor` from stage `stage` to stage + 1: `src` the offset of the
    sender's buffer, `dst` the receiver's, `count` elements of `dtype`."""

    stage: int
    tensor: str
    src: int
    dst: int
    count: int
    dtype: str


@dataclass
class Lane:
    """One chip's work: `coord` (replica, stage, tensor-parallel rank); `entries` its
    stage program (compiled for chip 0, END last); `tp_sites` its collective sites by
    node id; `recv` its receive sites (node id → received tensor); `send` the tensors
    it sends at the end of every segment."""

    chip: int
    coord: tuple[int, int, int]
    entries: list[dict[str, Any]]
    tp_sites: dict[str, SiteBuffers] = field(default_factory=dict)
    recv: dict[str, str] = field(default_factory=dict)
    send: list[str] = field(default_factory=list)


def _bytes_view(count: int, dtype: str) -> tuple[int, str]:
    """A send/recv's (count, dtype) as the collectives move it: a copy moves bytes, so
    an integer tensor moves as fp32 or bf16 words of the same bytes."""
    if dtype in ("bf16", "fp16", "fp32"):
        return count, dtype
    nbytes = count * _ELEM_BYTES.get(dtype, 0)
    if nbytes and nbytes % 8 == 0:
        return nbytes // 4, "fp32"
    if nbytes and nbytes % 4 == 0:
        return nbytes // 2, "bf16"
    raise InputError(f"--pp: a stage sends {count} elements of {dtype}, which do not move "
                     "as whole 4-byte words", field="--pp")


class _PipeMerger:
    def __init__(self, lanes: Sequence[Lane], transfers: dict[tuple[int, str], Transfer],
                 micro_batches: int, topo: Topology, limits: CmdqLimits,
                 scratch_base: int, region: int) -> None:
        self.lanes = list(lanes)
        self.transfers = transfers
        self.m = micro_batches
        self.topo, self.limits = topo, limits
        self.scratch_base, self.region = scratch_base, region
        self.per_chip_pes = len(topo.pes) // topo.chips
        per_chip_cubes = len(topo.cubes) // topo.chips
        self.bases = [topo.cubes[c * per_chip_cubes].hbm_base for c in range(topo.chips)]
        self.chip_at = {ln.coord: ln.chip for ln in self.lanes}
        self.out: list[dict[str, Any]] = []
        n = len(self.lanes)
        self.ids: list[dict[int, list[int]]] = [{} for _ in range(n)]
        self.sinks: list[dict[int, None]] = [{} for _ in range(n)]
        self.fence: list[list[int]] = [[] for _ in range(n)]
        self.fence_from = [0] * n
        self.lane_of = {ln.chip: i for i, ln in enumerate(self.lanes)}
        self.done: dict[tuple, dict[int, list[int]]] = {}
        self.arrived: dict[tuple, set[int]] = {}
        self.collectives = 0
        self.collective_entries = 0
        self.labels: list[str] = []

    # -- what each lane does, in order ------------------------------------------------
    def script(self, i: int) -> Iterator[tuple[str, Any, int]]:
        """("segment", None, m) | ("entry", e, m) | ("site", key, m) | ("copy", e, m) |
        ("send", key, m)."""
        ln = self.lanes[i]
        d, s, t = ln.coord
        for m in range(self.m):
            yield "segment", None, m
            for e in ln.entries:
                if e["opcode"] == "END":
                    continue
                lid = e.get("layer_id")
                key = self.key_of(ln, lid, m)
                if key is None:
                    yield "entry", e, m
                    continue
                if key not in self.done:
                    yield "site", key, m
                yield "copy", e, m
            for x in ln.send:
                yield "send", ("pp", d, s, t, m, x), m

    def key_of(self, ln: Lane, lid: Any, m: int) -> tuple | None:
        d, s, t = ln.coord
        if lid in ln.tp_sites:
            return ("tp", d, s, m, lid)
        if lid in ln.recv:
            return ("pp", d, s - 1, t, m, ln.recv[lid])
        return None

    def participants(self, key: tuple) -> list[int]:
        if key[0] == "tp":
            _, d, s, _m, _lid = key
            return [c for (dd, ss, _t), c in sorted(self.chip_at.items())
                    if dd == d and ss == s]
        _, d, s, t, _m, _x = key
        return [self.chip_at[(d, s, t)], self.chip_at[(d, s + 1, t)]]

    # -- the merge --------------------------------------------------------------------
    def run(self) -> MergedProgram:
        n = len(self.lanes)
        scripts = [self.script(i) for i in range(n)]
        pending: list[tuple[str, Any, int] | None] = [next(sc, None) for sc in scripts]
        waiting: list[tuple | None] = [None] * n
        while any(p is not None for p in pending):
            progressed = False
            for i in range(n):
                item = pending[i]
                if item is None or waiting[i] is not None:
                    continue
                kind, what, m = item
                if kind in ("site", "send"):
                    if what in self.done:  # reached by an earlier "site" of this lane
                        pending[i] = next(scripts[i], None)
                        progressed = True
                        continue
                    waiting[i] = what
                    got = self.arrived.setdefault(what, set())
                    got.add(self.lanes[i].chip)
                    if got == set(self.participants(what)):
                        self.collective(what, m)
                        for c in got:
                            waiting[self.lane_of[c]] = None
                            j = self.lane_of[c]
                            pending[j] = next(scripts[j], None)
                    progressed = True
                    continue
                if kind == "segment":
                    self.fence[i] = sorted(set(self.sinks[i]) | set(self.fence[i]))
                    self.fence_from[i] = len(self.out)
                    self.ids[i] = {}
                elif kind == "copy":
                    key = self.key_of(self.lanes[i], what.get("layer_id"), m)
                    assert key is not None
                    self.ids[i][what["id"]] = self.done[key][self.lanes[i].chip]
                else:
                    self.emit(i, what, m)
                pending[i] = next(scripts[i], None)
                progressed = True
            if not progressed:
                stuck = sorted({str(w) for w in waiting if w is not None})
                raise ValueError(f"the pipeline's lanes wait for each other: {stuck}")
        ends = {d for s in self.sinks for d in s} | {d for f in self.fence for d in f}
        self.out.append({"opcode": "END", "id": len(self.out), "layer_id": None,
                         "deps_before": sorted(ends)})
        return MergedProgram(self.out, self.collective_entries, self.labels)

    def label(self, lid: str, m: int) -> str:
        return f"{lid}@mb{m}" if self.m > 1 else lid

    def emit(self, i: int, e: dict[str, Any], m: int) -> None:
        chip = self.lanes[i].chip
        e = dict(e)
        new = len(self.out)
        old = e["id"]
        deps: list[int] = []
        for d in e.get("deps_before", ()):
            deps.extend(self.ids[i][d])
        if self.fence[i] and all(d < self.fence_from[i] for d in deps):
            deps.extend(self.fence[i])
        deps = sorted(set(deps))
        e["id"] = new
        e["deps_before"] = deps
        if "wait_for" in e:
            e["wait_for"] = sorted({x for d in e["wait_for"] for x in self.ids[i][d]})
        if e.get("layer_id") and self.m > 1:
            e["layer_id"] = self.label(e["layer_id"], m)
        _remap(e, chip * self.per_chip_pes, self.bases[chip], chip)
        self.out.append(e)
        self.ids[i][old] = [new]
        for d in deps:
            self.sinks[i].pop(d, None)
        self.sinks[i][new] = None

    def collective(self, key: tuple, m: int) -> None:
        chips = self.participants(key)
        if key[0] == "tp":
            sb = self.lanes[self.lane_of[chips[0]]].tp_sites[key[4]]
            op, src, dst, count, dtype = sb.site.op, sb.src, sb.dst, sb.count, sb.dtype
            lid = sb.site.node
        else:
            tr = self.transfers[(key[2], key[5])]
            op, src, dst = "send_recv", tr.src, tr.dst
            count, dtype = _bytes_view(tr.count, tr.dtype)
            lid = f"pp.recv.{tr.tensor}"
        scratch = self.scratch_base + (self.collectives % SCRATCH_REGIONS) * self.region
        self.collectives += 1
        c = Collective(op, count, tuple(chips), "ring", dtype)
        after = {ch: sorted(self.sinks[self.lane_of[ch]]) for ch in chips}
        prog = lower_collective(c, self.topo, self.limits,
                                buffers=Buffers(inp=src, out=dst, scratch=scratch,
                                                flags=scratch + self.region - ALIGN),
                                barrier=op != "send_recv", first_id=len(self.out),
                                after=after, end=False)
        entries = prog.doc["cmdq"]
        nbytes = count * c.elem_bytes
        stores: dict[int, list[int]] = {ch: [] for ch in chips}
        mine: dict[int, list[int]] = {ch: [] for ch in chips}
        for e in entries:
            e["layer_id"] = self.label(lid, m)
            ch = self.topo.chip_of(self.topo.pe(e["pe"]))
            mine.setdefault(ch, []).append(e["id"])
            lo = self.bases[ch] + dst
            if e["opcode"] == "DMA_STORE_TILE" and lo <= e["dram_addr"] < lo + nbytes:
                stores.setdefault(ch, []).append(e["id"])
        self.out.extend(entries)
        self.collective_entries += len(entries)
        if m == 0 and lid not in self.labels:
            self.labels.append(lid)
        every = set(range(entries[0]["id"], entries[-1]["id"] + 1)) if entries else set()
        for ch in chips:
            i = self.lane_of[ch]
            self.sinks[i] = dict.fromkeys(stores[ch])
            self.fence[i] = _sinks_of(self.out, set(mine[ch]) or every)
            self.fence_from[i] = len(self.out)
        self.done[key] = stores


def merge_pipeline(lanes: Sequence[Lane], transfers: Sequence[Transfer], micro_batches: int,
                   topo: Topology, limits: CmdqLimits, scratch_base: int) -> MergedProgram:
    """The multi-chip program of a pipeline-parallel run (see the module docstring):
    `lanes` one per chip, `transfers` every stage boundary's tensors with the sender's and
    receiver's buffer offsets, the collectives' scratch from `scratch_base` (an offset
    from each chip's HBM base) in rotating regions. Bad input (the program and its
    scratch do not fit a chip's HBM): one line, exit 2."""
    sizes = [tr.count * _ELEM_BYTES.get(tr.dtype, 4) for tr in transfers]
    sizes += [sb.count * _ELEM_BYTES[sb.dtype] for ln in lanes for sb in ln.tp_sites.values()]
    region = _align(2 * max(sizes, default=ALIGN)) + ALIGN
    per_chip = topo.hbm_bytes // topo.chips
    need = scratch_base + SCRATCH_REGIONS * region
    if need > per_chip:
        raise InputError(f"the pipeline-parallel program needs {need} bytes of HBM per "
                         f"chip; '{topo.name}' has {per_chip}", field="--pp")
    by = {(tr.stage, tr.tensor): tr for tr in transfers}
    return _PipeMerger(lanes, by, micro_batches, topo, limits, scratch_base, region).run()
