"""The TileGraph: tile operations on PEs with symbolic TCM buffers.

A `TileOp` becomes one CMDQ entry. It names its PE, its CMDQ fields (without TCM
addresses), the TCM buffers it reads and writes by operand role (`spm`, `ifm`, `wgt`,
`ofm`, `in`, `in2`, `out`, `bias`, `gamma`, `beta`, `scale`), and the HBM byte ranges it
reads and writes (storage key, first byte, hull end, row stride, row bytes). A `Buf` gets
its TCM offset in the tcm_alloc pass; dependencies come from these read/write sets in the
schedule pass. The invariants of each stage are checked by `kernbench.compiler.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False, slots=True)
class Buf:
    id: int
    pe: int
    nbytes: int
    label: str
    offset: int | None = None     # byte offset in the PE's AllocatableTCM
    bank: int | None = None
    bank_offset: int | None = None
    war_after: list[Buf] = field(default_factory=list)  # dead buffers this one reuses


@dataclass(eq=False, slots=True)
class TileOp:
    opcode: str
    pe: int
    layer: str
    fields: dict[str, Any]
    reads: list[tuple[str, Buf]] = field(default_factory=list)
    writes: list[tuple[str, Buf]] = field(default_factory=list)
    # (storage key, first byte, end of hull, row stride, row bytes)
    hbm_reads: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    hbm_writes: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    frees: list[Buf] = field(default_factory=list)
    stream: int = 0               # lowering stream (layer part) for interleaving
    buf_offset: int = 0           # bytes into the `spm` buffer (a DMA run of a split access)
    index: int = -1               # program position, set by the placement pass
    deps: list[int] = field(default_factory=list)
    fused_into: str = ""          # the GEMM layer whose epilogue runs this op
    #: bytes into its buffer at which an operand role starts (two operands packed in
    #: one buffer, e.g. an epilogue's scale and bias loaded by one DMA)
    role_offset: dict[str, int] | None = None
    #: a VE_FUSED_TILE's chained vector ops, first to last; its own reads and
    #: writes are what the chain as a whole reads and writes
    steps: list[TileOp] | None = None


@dataclass
class TileGraph:
    ops: list[TileOp] = field(default_factory=list)
    bufs: list[Buf] = field(default_factory=list)
    allocated: bool = False
    layer_tiles: dict[str, int] = field(default_factory=dict)
    # a layer computed inside another layer's tiles (a ReLU in a conv's epilogue) → that layer
    fused_into: dict[str, str] = field(default_factory=dict)
    #: view nodes (RESHAPE / TRANSPOSE / IDENTITY) of a tensor a lowering left unstored:
    #: their placements are gone, yet they moved nothing (`roofline.layer_bounds`)
    views: set[str] = field(default_factory=set)
    #: layers run as one whole-layer op (`layer_op`); `checks.check_tiles` compares them
    #: with the lowering plan's `whole`
    whole: set[str] = field(default_factory=set)
    #: layers of one tile → the PE it runs on, as the lowering plan's `lone` gave it
    #: (`Lowering.lone_pe`; `checks.check_tiles` compares the two)
    lone: dict[str, int] = field(default_factory=dict)
    #: layers that take an op of their own → the PEs their tiles drew from the round-robin
    #: (`placement.PeCursor.position`; `checks.check_tiles` compares them with the plan's
    #: `first_pe` on one cube)
    drawn: dict[str, int] = field(default_factory=dict)
    #: per IR node (graph order), the lowering stream its ops start at: which node emitted
    #: an op (`region.node_of`)
    node_streams: list[int] = field(default_factory=list)

    def dump(self) -> str:
        lines = []
        for op in self.ops:
            bufs = ", ".join(f"{r}={b.label}@{b.offset}" for r, b in op.reads + op.writes)
            lines.append(f"{op.index:6d} pe{op.pe:<3d} {op.opcode:20s} {op.layer:24s} {bufs}"
                         f" deps={op.deps}")
        return "\n".join(lines)
