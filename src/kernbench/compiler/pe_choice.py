"""How many PEs a small model runs on: the cost model picks among nested subsets.

A model too small to fill the NPU pays for a wide spread: transfers cross the mesh and
UCIe, every layer's blocks wait on more command round trips, and each PE gets a few
rows. The compiler therefore also compiles the model for the first cube alone, and for
half, a quarter, ... of that cube's PEs (down to `MIN_PES`), estimates every
candidate program end to end with the cost model (`cost_schedule`, on the real
topology: a candidate's entries name the same PEs and addresses there, the other PEs
stay idle) and keeps the fastest; ties keep the wider spread.

A subset is part of cube 0 (HBM and SRAM from address 0, its M_CPU): all of its PEs,
then the k PEs nearest its command processor's router (the M_CPU, where every command
starts and every completion returns; the HBM controller and SRAM sit there too on the
presets), by mesh hops, then by the larger of the row and column distance (a square
block before a row), then by layout order. A candidate is compiled on a
topology of those PEs; its program's PE indices are then mapped back to the topology's
(`remap_pes`). The first k PEs of the layout, a row of the mesh, were the subsets
before: on `base` they left a small model slower than on `small`, whose 2 × 2 PEs all
sit within two hops of the M_CPU. Only programs of at most `MAX_ENTRIES` entries
on the whole topology are considered: larger ones fill the NPU, and the candidates would
cost compile time for nothing. The roofline stays that of the whole topology (`state.topology` is restored):
idle PEs count as peak not used, as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernbench.cmdq.hw import to_program
from kernbench.cmdq.io import parse_entries
from kernbench.compiler.cost import CostModel
from kernbench.compiler.cost_schedule import schedule
from kernbench.compiler.state import CompileState
from kernbench.errors import InputError
from kernbench.ir.model import Graph
from kernbench.topology.build import build_topology
from kernbench.topology.model import Topology, split_router

#: programs above this many entries on the whole topology are compiled for all of it
MAX_ENTRIES = 20_000
#: the smallest subset tried
MIN_PES = 4


@dataclass(frozen=True)
class PeChoice:
    """The PEs the program uses (`pes` of the topology's `of`: cube 0's, or those nearest
    its M_CPU) and every candidate's estimated end-to-end time (PE count → ns)."""

    pes: int
    of: int
    estimates_ns: dict[int, float]

    def to_json(self) -> dict[str, Any]:
        return {"pes": self.pes, "of": self.of,
                "estimates_ns": {str(k): round(v, 3) for k, v in self.estimates_ns.items()}}

    def note(self) -> str:
        ests = ", ".join(f"{k} PEs {v / 1000:.2f} µs" for k, v in
                         sorted(self.estimates_ns.items(), reverse=True))
        return (f"PEs: the program uses {self.pes} of the {self.of} PEs (cost-model "
                f"estimates: {ests}; --all-pes spreads over all)")


def nearest(layout: list[str], center: str, k: int) -> list[str]:
    """The `k` routers of `layout` nearest `center` (hops, then the larger of the row and
    column distance, then layout order), in layout order."""
    _, r0, c0 = split_router(center)

    def key(i: int) -> tuple[int, int, int]:
        _, r, c = split_router(layout[i])
        return abs(r - r0) + abs(c - c0), max(abs(r - r0), abs(c - c0)), i

    return [layout[i] for i in sorted(sorted(range(len(layout)), key=key)[:k])]


def subsets(topology: Topology) -> list[Topology]:
    """The candidate sub-topologies, widest first: cube 0 with all its PEs (when there is
    more than one cube), then the half, quarter, ... of them nearest its M_CPU, down to
    MIN_PES."""
    cfg = topology.config
    layout = list(cfg.cube.pe_layout)
    out = []
    k = len(layout)
    if len(topology.cubes) == 1:
        k //= 2
    while k >= MIN_PES:
        sip = cfg.sip.model_copy(update={
            "count": 1, "cubes": cfg.sip.cubes.model_copy(update={"rows": 1, "cols": 1})})
        cube = cfg.cube.model_copy(update={"pe_layout": nearest(layout, cfg.cube.m_cpu.router,
                                                                k)})
        out.append(build_topology(cfg.model_copy(update={"sip": sip, "cube": cube})))
        k //= 2
    return out


def remap_pes(state: CompileState, sub: Topology, topology: Topology) -> None:
    """Give `state`'s program (compiled on `sub`, part of `topology`'s cube 0) the
    topology's own PE indices: each PE is the topology's PE at the same router."""
    index = {pe.router: i for i, pe in enumerate(topology.pes)}
    to = [index[pe.router] for pe in sub.pes]
    if to == list(range(len(to))):
        return
    if state.cmdq is not None:
        for e in state.cmdq.entries:
            if isinstance(e.get("pe"), int):
                e["pe"] = to[e["pe"]]
    if state.tiles is not None:
        for op in state.tiles.ops:
            op.pe = to[op.pe]
        for b in state.tiles.bufs:
            b.pe = to[b.pe]


def estimate_ns(state: CompileState, topology: Topology) -> float:
    """End-to-end cost-model estimate of `state`'s program run on `topology`."""
    doc = state.cmdq
    assert doc is not None
    prog = parse_entries(list(doc.entries), doc.to_json()["metadata"])
    entries = list(to_program(prog, topology))
    placed = schedule(entries, topology, CostModel(topology))
    return max((p.end for p in placed.values()), default=0.0)


def compile_on_best_pes(graph: Graph, topology: Topology,
                        compile_fn: Callable[[Graph, Topology], CompileState],
                        whole: CompileState | None = None) -> CompileState:
    """`compile_fn(graph, topology)`, or the same graph compiled for a subset of the PEs
    when the cost model estimates that faster (module docstring); the returned state's
    `pe_choice` says which, and its topology is `topology`. `whole`: the program for all
    of `topology`, already compiled from a copy of `graph` (which is then left as it is)."""
    cands = subsets(topology) if len(topology.pes) > MIN_PES else []
    if not cands:
        return whole if whole is not None else compile_fn(graph, topology)
    pristine = structure_copy(graph)  # the passes rewrite the graph they compile
    best = whole if whole is not None else compile_fn(graph, topology)
    if best.cmdq is None or len(best.cmdq.entries) > MAX_ENTRIES:
        return best
    n = best_k = len(topology.pes)
    ests = {n: estimate_ns(best, topology)}
    best_ns = ests[n]
    for sub in cands:
        try:
            st = compile_fn(structure_copy(pristine), sub)
        except InputError:
            continue  # does not fit the subset (HBM, TCM): a wider spread is needed
        remap_pes(st, sub, topology)
        k = len(sub.pes)
        ests[k] = estimate_ns(st, topology)
        if ests[k] < best_ns:
            best, best_ns, best_k = st, ests[k], k
    best.topology = topology
    best.pe_choice = PeChoice(best_k, n, ests)
    if best.pe_choice.pes < n:
        best.notes.append(best.pe_choice.note())
    return best


def structure_copy(graph: Graph) -> Graph:
    """A copy of `graph` whose nodes, tensors and weight table are its own but whose
    weight arrays are shared: the passes add and replace weights, never write into one,
    and a shape-only model's weights are broadcast views that a deep copy would
    materialize (an 8B model's would take 32 GB)."""
    memo = {id(a): a for a in graph.weights.values()}
    return copy.deepcopy(graph, memo)


__all__ = ["MAX_ENTRIES", "MIN_PES", "PeChoice", "compile_on_best_pes", "estimate_ns",
           "nearest", "remap_pes", "structure_copy", "subsets"]
