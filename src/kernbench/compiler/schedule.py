"""Schedule pass: the dependencies of every tile op.

As few and as precise as correctness needs: read-after-write on TCM buffers (last
writer), write-after-read / write-after-write on reused TCM space, and on HBM byte ranges
read-after-write (a load waits only for the stores that wrote bytes it reads),
write-after-write and write-after-read. A load of constants, which depends on nothing,
may run ahead of its layer by `PREFETCH_LAYERS` layers of its PE: it waits until the PE
has computed the layer that many layers back, so a GEMM's weights stream in while the
short layers before it (LayerNorm, a residual ADD) run, and its activation load does not
queue behind them on the PE's DMA channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.state import CompileState

#: how many of its PE's layers a load of constants may run ahead of (1: only within its
#: own layer, after the previous one has computed)
PREFETCH_LAYERS = 3


def overlaps(a: tuple, b: tuple) -> bool:
    """Do two HBM ranges (lo, hi, stride, row_bytes) of one storage share a byte?"""
    lo1, hi1, st1, rb1 = a
    lo2, hi2, st2, rb2 = b
    if not (lo1 < hi2 and lo2 < hi1):
        return False
    if st1 == st2 and rb1 < st1 and rb2 < st2:
        # same row pitch: overlapping only if the column intervals meet. On a circle of one
        # pitch, range 1's rows start at 0 and range 2's at d; whatever the storage's
        # alignment (a block may straddle a multiple of the pitch), they meet iff range 2
        # starts inside range 1 or range 1 starts inside range 2
        d = (lo2 - lo1) % st1
        return d < rb1 or d + rb2 > st1
    return True


@dataclass(frozen=True)
class Schedule:
    """Dependencies of every tile op (`TileOp.deps`)."""

    name: str = "schedule"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("deps",)

    def apply(self, state: CompileState) -> CompileState:
        # PE → [(layer, its latest compute op)] of the PE's latest layers, newest last:
        # bounds how far ahead loads of constants may run
        last_compute: dict[int, list[tuple[str, int]]] = {}
        last_writer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        accessed: dict[int, list[int]] = {}
        hbm_writes: dict[str, list[tuple[tuple, int]]] = {}
        hbm_reads: dict[str, list[tuple[tuple, int]]] = {}
        for op in state.require_tiles().ops:
            deps: set[int] = set()
            for _, b in op.reads:
                w = last_writer.get(b.id)
                if w is not None:
                    deps.add(w)
            for _, b in op.writes:
                if b.id not in last_writer and b.war_after:
                    for dead in b.war_after:  # space reuse: previous users finish first
                        deps.update(accessed.get(dead.id, ()))
                w = last_writer.get(b.id)
                if w is not None:
                    deps.add(w)
                deps.update(readers.get(b.id, ()))
            for key, *rng in op.hbm_reads:
                for other, idx in hbm_writes.get(key, ()):
                    if overlaps(rng, other):
                        deps.add(idx)
            for key, *rng in op.hbm_writes:  # WAW and WAR on HBM bytes
                for other, idx in hbm_writes.get(key, []) + hbm_reads.get(key, []):
                    if overlaps(rng, other):
                        deps.add(idx)
            if not deps and op.opcode == "DMA_LOAD_TILE" and op.pe in last_compute:
                # a load of constants depends on nothing: without a bound the FSM would
                # prefetch every later layer's weights first and starve the critical path.
                # It may run ahead within its layer, but not before the PE's previous layer
                # has computed.
                hist = last_compute[op.pe]
                # layers of this PE finished before the load's own layer started
                done = hist[:-1] if hist[-1][0] == (op.fused_into or op.layer) else hist
                if len(done) >= PREFETCH_LAYERS:
                    deps.add(done[-PREFETCH_LAYERS][1])
            deps.discard(op.index)
            if any(d > op.index for d in deps):
                raise RuntimeError(f"schedule: op {op.index} depends on a later op")
            op.deps = sorted(deps)
            for _, b in op.reads:
                readers.setdefault(b.id, []).append(op.index)
                accessed.setdefault(b.id, []).append(op.index)
            for _, b in op.writes:
                last_writer[b.id] = op.index
                readers[b.id] = []
                accessed.setdefault(b.id, []).append(op.index)
            for key, *rng in op.hbm_writes:
                hbm_writes.setdefault(key, []).append((tuple(rng), op.index))
            for key, *rng in op.hbm_reads:
                hbm_reads.setdefault(key, []).append((tuple(rng), op.index))
            if not op.opcode.startswith("DMA"):
                hist = last_compute.setdefault(op.pe, [])
                layer = op.fused_into or op.layer  # a fused epilogue op is its GEMM's
                if hist and hist[-1][0] == layer:
                    hist[-1] = (layer, op.index)
                else:
                    hist.append((layer, op.index))
                    del hist[:-PREFETCH_LAYERS - 1]
        return state
