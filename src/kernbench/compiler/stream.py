"""The compiler, layer by layer: a program whose host memory does not grow with the model.

`compile_graph` keeps the whole TileGraph from tiling to emit: ≈ 2-3 KB per CMDQ entry, so
a real-size model simulated with `--exact` held hundreds of MB for its program alone. A
timing run that keeps no per-entry record (no trace, no report, no data pass) needs the
entries only while the Control FSM holds them, so `compile_streamed` produces them one IR
node at a time, as the simulator fetches them:

1. the passes before tiling run as in `compile_graph` (PassManager, checks);
2. a *survey* lowers every node once and keeps only what the stream needs to know in
   advance: entries per layer (progress, per-layer spans), the whole-layer-op census, the
   storage pins (planned again, as `lower_graph` does) and which node last touches each HBM
   storage (`schedule.StorageUse`: what the scheduler may forget). Each node's ops are
   dropped once counted; constants get their HBM addresses here, in the same order as in
   `compile_graph`;
3. `StreamedCompile.chunks()` lowers the graph again and, per node, runs placement
   (`order.interleave`), TCM allocation (`TcmAllocator`), the schedule (`Scheduler`) and
   emission (`Emitter`) on that node's ops only, then forgets them. Each stage is the one
   the whole-program pass runs, fed in pieces, so the entries are the ones `compile_graph`
   emits (tests/compiler/test_stream.py compares them entry by entry).

What stays is per layer or per live storage: the per-layer counts, the lowering's caches
of prepared weights, the scheduler's accesses of storages still to be read, the TCM rings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kernbench.compiler.checks import check_memory
from kernbench.compiler.emit import Emitter
from kernbench.compiler.hbm import MemoryPlan
from kernbench.compiler.layer_ops import CensusCounter, LayerOpCensus
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.tile_pass import lower_node, start_lowering, with_pins
from kernbench.compiler.manager import PassManager
from kernbench.compiler.order import interleave
from kernbench.compiler.pipeline import PASSES
from kernbench.compiler.schedule import Scheduler, StorageUse
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.compiler.tcm_alloc import TcmAllocator
from kernbench.compiler.tilegraph import TileGraph, TileOp
from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR
from kernbench.topology.model import Topology

#: the passes `compile_graph` runs before tiling (whole-graph and cheap: per tensor)
BEFORE_TILING = tuple(PASSES[:[p.name for p in PASSES].index("tiling")])
#: the rest, for a program compiled whole after all (`StreamedCompile.finish`)
FROM_TILING = PASSES[len(BEFORE_TILING):]


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
        list). One pass only: the lowering it runs places nothing new."""
        self._start()
        state = self.state
        lw = start_lowering(state)
        alloc = TcmAllocator(state.topology)
        sched = Scheduler(self.survey.use)
        emit = Emitter()
        first = 0
        for n in state.graph.nodes:
            ops = _lower_alone(lw, n)
            if not ops:
                continue
            ops = interleave(ops, first)
            first += len(ops)
            retired = alloc.feed(ops)
            sched.feed(ops)
            sched.forget(retired)
            hbm, tcm = sched.kept()
            self.peak_kept = (max(self.peak_kept[0], hbm), max(self.peak_kept[1], tcm))
            yield emit.feed(ops)
        if first + 1 != self.entries:
            raise RuntimeError(f"compile_streamed: {first + 1} entries produced, the survey "
                               f"counted {self.entries}")
        yield [emit.end()]


def _lower_alone(lw: Lowering, n: LayerIR) -> list[TileOp]:
    """The ops of node `n`, taken out of the lowering's TileGraph (which then holds none)."""
    lower_node(lw, n)
    ops = lw.tg.ops
    lw.tg.ops = []
    lw.tg.bufs = []
    return ops


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
        check_memory(CompileState(state.graph, topology, memory=survey.memory))
    except ValueError as e:
        raise InputError(f"cannot compile: {e}") from None
    return StreamedCompile(state, survey)


def _survey(state: CompileState) -> Survey:
    """Lower every node once, on a copy of the memory plan, keeping counts and storage use
    only; storages a whole-layer op touches are pinned and the memory planned again
    (`tile_pass.with_pins`, as the tiling pass does)."""
    return with_pins(state, _survey_once)


def _survey_once(state: CompileState) -> tuple[Lowering, Survey]:
    pristine = state.memory
    assert pristine is not None
    state.memory = pristine.copy()
    lw = start_lowering(state)
    memory, state.memory = state.memory, pristine
    use = StorageUse(lw.tg.node_streams)
    census = CensusCounter({n.id: n.op_type for n in state.graph.nodes})
    per_layer: dict[str, int] = {}
    count = 0
    for n in state.graph.nodes:
        ops = _lower_alone(lw, n)
        use.see(ops)
        census.add(ops)
        count += len(ops)
        for op in ops:
            per_layer[op.layer] = per_layer.get(op.layer, 0) + 1
    return lw, Survey(count + 1, per_layer, census.census(count + 1), use, lw.tg, memory)


__all__ = ["BEFORE_TILING", "FROM_TILING", "StreamedCompile", "Survey", "compile_streamed"]
