"""Regions: the passes from tiling on run over the program a run of IR nodes at a time.

`compile_graph` runs each pass once on the whole program. A streamed compile
(`compiler.stream`) runs the same passes (pipeline.PASSES from `tiling` on) on one
`Region` after another, in graph order: each such pass has `on_regions`, which gives a
`RegionStep` built on the same stage its `apply` feeds the whole program (the lowering,
`order.interleave`, `TcmAllocator`, `Scheduler`, `Emitter`), fed in pieces. A step reads
what the steps before it left in the region and writes what it makes; `end` runs once
after the last region (the emit pass adds END). So the streamed program is the
whole-program one (tests/compiler/test_stream.py compares them entry by entry), and what
each step keeps follows the live storages and buffers, not the program.

What a streamed compile knows before its first region is which node last touches each
HBM storage (`StorageUse`, from a survey of the lowering: what the scheduler may forget).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileOp
from kernbench.ir.model import LayerIR


@dataclass
class Region:
    """IR nodes next to each other in graph order, and what the passes made of them."""

    nodes: Sequence[LayerIR]
    #: their tile ops (tiling), in program order and indexed once placed
    ops: list[TileOp] = field(default_factory=list)
    #: TCM buffers the allocator no longer offers for reuse (their users need no waits)
    retired: list[Buf] = field(default_factory=list)
    #: HBM accesses and TCM buffer users the scheduler remembers after the region
    kept: tuple[int, int] = (0, 0)
    #: the CMDQ entries of the ops (emit)
    entries: list[dict[str, Any]] = field(default_factory=list)


class RegionStep(Protocol):
    """One pass, run on a program region by region (module docstring)."""

    def feed(self, region: Region) -> None:
        """Do the pass's work on `region` (the next one in graph order)."""

    def end(self, region: Region) -> None:
        """After the last region: add what closes the program to `region` (no nodes)."""


class RegionPass(Protocol):
    """A pass that can run region by region (`compiler.stream`)."""

    name: str

    def on_regions(self, state: CompileState, use: StorageUse) -> RegionStep:
        """A step over the regions of `state`'s program, `use` told in advance."""


def node_of(node_streams: list[int], stream: int) -> int:
    """The position of the IR node whose lowering emitted ops of `stream` (-1: before
    the first node)."""
    return bisect_right(node_streams, stream) - 1


class StorageUse:
    """Which IR node last touches each HBM storage, and which storages are ever written:
    gathered from the ops themselves (`see`), so the scheduler forgets exactly what no
    later op can depend on."""

    def __init__(self, node_streams: list[int]) -> None:
        self.node_streams = node_streams
        self.last: dict[str, int] = {}
        self.written: set[str] = set()

    def see(self, ops: Sequence[TileOp]) -> None:
        stream, node = None, -1
        last, written = self.last, self.written
        for op in ops:
            if op.stream != stream:  # a node's ops share their streams: look up on a change
                stream = op.stream
                node = node_of(self.node_streams, stream)
            for h in op.hbm_reads:
                last[h[0]] = node
            for h in op.hbm_writes:
                last[h[0]] = node
                written.add(h[0])


__all__ = ["Region", "RegionPass", "RegionStep", "StorageUse", "node_of"]
