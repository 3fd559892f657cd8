"""Collectives across chips (docs/multichip.md): all-reduce, all-gather, reduce-scatter,
all-to-all and send/recv, by ring, direct or 2-D algorithms, planned as tile moves between
chips' HBM buffers (`plan`) and lowered to the DMA and vector-add CMDQ entries they are
made of (`lower`). The chip-to-chip bytes travel as ordinary DMAs whose HBM address is on
another chip, so they cross the chip links of the topology."""

from kernbench.compiler.collectives.lower import CollectiveProgram, lower_collective
from kernbench.compiler.collectives.plan import (
    ALGORITHMS,
    OPS,
    Buffers,
    Collective,
    Move,
    plan_collective,
)

__all__ = ["ALGORITHMS", "OPS", "Buffers", "Collective", "CollectiveProgram", "Move",
           "lower_collective", "plan_collective"]
