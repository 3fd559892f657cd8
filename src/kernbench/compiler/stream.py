"""The compiler, layer by layer: a program whose host memory does not grow with the model.

`compile_graph` keeps the whole TileGraph from tiling to emit: ≈ 2-3 KB per CMDQ entry, so
a real-size model simulated with `--exact` held hundreds of MB for its program alone. A
timing run that keeps no per-entry record (no trace, no report, no data pass) needs the
entries only while the Control FSM holds them, so `compile_streamed` produces them one IR
node at a time, as the simulator fetches them:

1. the passes before tiling run as in `compile_graph` (PassManager, checks);
2. a *survey* lowers every node once and keeps only what the stream needs to know in
   advance: entries per layer (progress, per-layer spans), the whole-layer-op census and
   which node last touches each HBM storage (`region.StorageUse`: what the scheduler may forget). Each node's ops are
   dropped once counted; constants get their HBM addresses here, in the same order as in
   `compile_graph`;
3. `StreamedCompile.chunks()` runs the passes from tiling on (`FROM_TILING`: tiling,
   placement, TCM allocation, schedule, emit) on one region of one IR node after another
   (`compiler.region`: each pass's `on_regions`, the stage its whole-program `apply`
   feeds, fed in pieces), then forgets the region. The entries are the ones
   `compile_graph` emits (tests/compiler/test_stream.py compares them entry by entry).

What stays is per layer or per live storage: the per-layer counts, the lowering's caches
of prepared weights, the scheduler's accesses of storages still to be read, the TCM rings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kernbench.compiler.checks import CHECKS
from kernbench.compiler.hbm import MemoryPlan
from kernbench.compiler.layer_ops import CensusCounter, LayerOpCensus
from kernbench.compiler.lower.tile_pass import Tile
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASSES
from kernbench.compiler.region import Region, RegionPass, StorageUse
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.compiler.tilegraph import TileGraph
from kernbench.errors import InputError
from kernbench.ir.model import Graph
from kernbench.topology.model import Topology

#: the passes `compile_graph` runs before tiling (whole-graph and cheap: per tensor)
BEFORE_TILING = tuple(PASSES[:[p.name for p in PASSES].index("tiling")])
#: the rest: run region by region (`StreamedCompile.chunks`), or on a program compiled
#: whole after all (`StreamedCompile.finish`)
FROM_TILING: tuple[RegionPass, ...] = PASSES[len(BEFORE_TILING):]
#: the tiling pass, which the survey runs region by region
TILING = next(p for p in PASSES if isinstance(p, Tile))


class Survey(NamedTuple):
    """What the stream must know before it starts (module docstring, step 2)."""

    entries: int                   # CMDQ entries, END included
    layer_entries: dict[str, int]  # entries per layer id
    census: LayerOpCensus          # whole-layer ops
    use: StorageUse                # which node last touches each storage
    tiles: TileGraph               # the lowering's TileGraph without ops: tiles per layer
    memory: MemoryPlan             # the plan as the lowering completes it


@dataclass
class StreamedCompile:
    """A compile whose entries are produced on demand (`chunks`, once), or compiled whole
    after all (`finish`). `state` has the graph after the passes before tiling and the
    memory plan those leave; `survey.memory` is the plan once the lowering has placed the
    constants (what the bundle's memory.json holds)."""

    state: CompileState
    survey: Survey
    #: after `chunks()` is exhausted: the most HBM accesses and TCM buffer users the
    #: scheduler remembered at a node boundary (what its memory follows)
    peak_kept: tuple[int, int] = (0, 0)
    _started: bool = field(default=False, repr=False)

    @property
    def entries(self) -> int:
        return self.survey.entries

    def bundle_state(self) -> CompileState:
        """A state for `pipeline.write_bundle(..., cmdq=False, entries=self.entries)`: the
        graph, the completed memory plan, the layer facts of the tile graph."""
        return dataclasses.replace(self.state, memory=self.survey.memory,
                                   tiles=self.survey.tiles)

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("StreamedCompile: the program was already produced")
        self._started = True

    def finish(self) -> tuple[CompileState, PassManager]:
        """The program compiled whole instead, by the passes from tiling on (what
        `compile_graph` returns for the same graph: a small program, for the PE choice)."""
        self._start()
        pm = PassManager(FROM_TILING)
        return pm.run(self.state), pm

    def chunks(self) -> Iterator[list[dict[str, Any]]]:
        """The CMDQ entries, one list per IR node that has ops, END last (in its own
        list): `FROM_TILING` run region by region, a region per node (a region without
        ops goes no further than tiling). One pass only: the lowering it runs places
        nothing new."""
        self._start()
        steps = [p.on_regions(self.state, self.survey.use) for p in FROM_TILING]
        produced = 0
        for n in self.state.graph.nodes:
            region = Region((n,))
            for step in steps:
                step.feed(region)
                if not region.ops:
                    break
            if not region.ops:
                continue
            produced += len(region.entries)
            self.peak_kept = (max(self.peak_kept[0], region.kept[0]),
                              max(self.peak_kept[1], region.kept[1]))
            yield region.entries
        if produced + 1 != self.entries:
            raise RuntimeError(f"compile_streamed: {produced + 1} entries produced, the "
                               f"survey counted {self.entries}")
        last = Region(())
        for step in steps:
            step.end(last)
        yield last.entries


def compile_streamed(graph: Graph, topology: Topology, options: CompileOptions | None = None,
                     *, progress: Callable[[str], None] | None = None) -> StreamedCompile:
    """Run the passes before tiling and the survey (module docstring); the entries come
    from `.chunks()`. A layer the compiler cannot handle is an InputError naming it."""
    state = CompileState(graph, topology, options or CompileOptions())
    try:
        state = PassManager(BEFORE_TILING, progress=progress).run(state)
        if progress is not None:
            progress("tiling")
        survey = _survey(state)
        # what the pass manager checks after the tiling pass, but its ops: the survey
        # keeps none (the memory as the lowering completed it)
        checked = dataclasses.replace(state, memory=survey.memory)
        for product in TILING.produces:
            if product != "tiles":
                CHECKS[product](checked)
    except ValueError as e:
        raise InputError(f"cannot compile: {e}") from None
    return StreamedCompile(state, survey)


def _survey(state: CompileState) -> Survey:
    """Lower every node once (the tiling pass region by region, `Tile.on_regions`), on a
    copy of the memory plan, keeping counts and storage use only (the plan pass already
    pinned what the layers run whole touch)."""
    pristine = state.memory
    assert pristine is not None
    state.memory = pristine.copy()
    use = StorageUse([])
    tiling = TILING.on_regions(state, use)  # the tiling pass, region by region
    memory, state.memory = state.memory, pristine
    lw = tiling.lowering
    use.node_streams = lw.tg.node_streams  # filled as the regions are lowered
    census = CensusCounter({n.id: n.op_type for n in state.graph.nodes})
    per_layer: dict[str, int] = {}
    count = 0
    for n in state.graph.nodes:
        region = Region((n,))
        tiling.feed(region)
        ops = region.ops
        use.see(ops)
        census.add(ops)
        count += len(ops)
        for op in ops:
            per_layer[op.layer] = per_layer.get(op.layer, 0) + 1
    return Survey(count + 1, per_layer, census.census(count + 1), use, lw.tg, memory)


__all__ = ["BEFORE_TILING", "FROM_TILING", "StreamedCompile", "Survey", "compile_streamed"]
