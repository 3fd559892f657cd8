"""What the compiler passes transform: the IR graph plus everything derived from it.

Early passes (quantize, layout) rewrite or annotate the IR `graph`; later ones fill in
`memory` (HBM placement of every tensor), `lowering_plan` (the decisions spanning several
ops), `tiles` (the TileGraph: per-layer tile ops with
symbolic TCM buffers, their PEs, and TCM offsets once allocated) and finally `cmdq`. Every
field is typed; a pass that needs a product of an earlier pass asks for it with
`require_memory()` / `require_tiles()`, which fail clearly when the passes run out of
order. `dump()` renders what exists so far (for --dump-after).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from kernbench.compiler.hbm import MemoryPlan
from kernbench.compiler.lower.plan import LoweringPlan
from kernbench.compiler.tilegraph import TileGraph
from kernbench.ir.model import Graph
from kernbench.topology.model import Topology

#: how the layout pass folds a head transpose: its consumers read the source with strides
#: ("read"), or the attention producing its input writes straight into its output ("write")
FoldKind = Literal["read", "write"]


@dataclass
class CompileOptions:
    seed: int = 0                     # calibration / default-input seed
    calib_inputs: dict[str, np.ndarray] | None = None
    # HBM reuse by liveness (compiler.liveness): None = for shape-only models (timing only:
    # nothing reads a dead intermediate back); True/False force it. A data pass with reuse
    # is exact, but `--dump-intermediates` would read overwritten layer outputs.
    reuse_hbm: bool | None = None
    # constants copied into every cube (True) or placed once each, spread over the cubes
    # (False); None = copied when they fit each cube beside the activations
    # (compiler.weights_fit)
    replicate_constants: bool | None = None
    # calibration values by graph content (compiler.quantize), kept while a caller compiles
    # one graph several times (compiler.pe_choice's PE subsets) and sets a dict here; None
    # keeps nothing (the values are activations: a real-weight model's can be large)
    calibration: dict[Any, dict[str, np.ndarray]] | None = field(default=None, repr=False,
                                                                 compare=False)


@dataclass(frozen=True)
class CmdqMetadata:
    """The `metadata` object of an emitted CMDQ program (spec §4)."""

    version: str
    graph_name: str
    generated_by: str
    topology: str


@dataclass
class CmdqDocument:
    """The emitted program: entries in the CMDQ JSON wire format (one object per entry,
    fields as the spec names them, in program order, END last) and its metadata."""

    entries: list[dict[str, Any]]
    metadata: CmdqMetadata

    def to_json(self) -> dict[str, Any]:
        """The cmdq.json document."""
        return {"cmdq": self.entries, "metadata": asdict(self.metadata)}


@dataclass
class CompileState:
    graph: Graph
    topology: Topology
    options: CompileOptions = field(default_factory=CompileOptions)
    memory: MemoryPlan | None = None
    folded: dict[str, FoldKind] = field(default_factory=dict)  # transpose node → fold
    #: layer outputs stored transposed (layout pass): tensor → perm; the storage has shape
    #: [shape[p] for p in perm] and the tensor is that storage seen through permuted strides
    stored_permuted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: storage keys kept whole in one cube (read or written by a layer the plan pass runs
    #: whole, `whole_plan`)
    pinned: set[str] = field(default_factory=set)
    #: the decisions spanning several ops, made by the plan pass for the tiling pass
    lowering_plan: LoweringPlan | None = None
    tiles: TileGraph | None = None
    cmdq: CmdqDocument | None = None
    notes: list[str] = field(default_factory=list)
    #: the PEs the program was compiled for (compiler.pe_choice), None: not chosen
    pe_choice: Any = None

    def require_memory(self) -> MemoryPlan:
        """The memory plan; a pass that needs it runs after `memory`."""
        if self.memory is None:
            raise RuntimeError("compiler: this pass needs the memory plan (run 'memory' first)")
        return self.memory

    def require_lowering_plan(self) -> LoweringPlan:
        """The lowering plan; the tiling pass runs after `plan`."""
        if self.lowering_plan is None:
            raise RuntimeError("compiler: this pass needs the lowering plan (run 'plan' first)")
        return self.lowering_plan

    def require_tiles(self) -> TileGraph:
        """The TileGraph; a pass that needs it runs after `tiling`."""
        if self.tiles is None:
            raise RuntimeError("compiler: this pass needs the TileGraph (run 'tiling' first)")
        return self.tiles

    def dump(self) -> str:
        parts = [self.graph.to_json()]
        if self.memory is not None:
            parts.append(json.dumps(self.memory.to_json(), indent=1, sort_keys=True))
        if self.lowering_plan is not None:
            parts.append(self.lowering_plan.dump())
        if self.tiles is not None:
            parts.append(self.tiles.dump())
        if self.cmdq is not None:
            parts.append(json.dumps(self.cmdq.to_json(), indent=1))
        return "\n\n".join(parts)
