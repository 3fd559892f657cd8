"""What the compiler passes transform: the IR graph plus everything derived from it.

Early passes (quantize, layout) rewrite the IR `graph`; later ones fill in `memory`
(HBM placement of every tensor), `tiles` (the TileGraph: per-layer tile ops with
symbolic TCM buffers, their PEs, and TCM offsets once allocated) and finally `cmdq`.
`verify(after=...)` checks what exists so far; `dump()` renders it for --dump-after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernbench.ir.model import Graph
from kernbench.topology.model import Topology


@dataclass
class CompileOptions:
    seed: int = 0                     # calibration / default-input seed
    calib_inputs: dict[str, np.ndarray] | None = None


@dataclass
class CompileState:
    graph: Graph
    topology: Topology
    options: CompileOptions = field(default_factory=CompileOptions)
    memory: Any = None      # compiler.memory_plan.MemoryPlan
    folded: dict[str, Any] = field(default_factory=dict)  # tensor id → strided view info
    tiles: Any = None       # compiler.tilegraph.TileGraph
    cmdq: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def verify(self, after: str = "") -> None:
        from kernbench.ir.verify import verify as verify_ir

        verify_ir(self.graph)
        if self.memory is not None:
            self.memory.verify()
        if self.tiles is not None:
            self.tiles.verify(self.topology)

    def dump(self) -> str:
        parts = [self.graph.to_json()]
        if self.memory is not None:
            parts.append(json.dumps(self.memory.to_json(), indent=1, sort_keys=True))
        if self.tiles is not None:
            parts.append(self.tiles.dump())
        if self.cmdq is not None:
            parts.append(json.dumps(self.cmdq, indent=1))
        return "\n\n".join(parts)
