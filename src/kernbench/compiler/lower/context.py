"""The state every lowering shares: the TileGraph being built and how to add to it.

A `Lowering` holds the graph, the memory plan, the TCM geometry and the PE cursor, and
builds tile operations: `buf` (a symbolic TCM buffer, at most one bank), `op` (a tile op in
the current phase), `dma` (a 1-D or 2-D strided DMA between a TCM buffer and a placement),
`const` (a replicated constant in HBM). `phase()` starts a new lowering phase: the
placement pass never moves an op across a phase boundary, so ops after it may depend on
any op before it. The GEMM lowering caches prepared weights and activations here, so
that a weight or an activation read by several layers is converted once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.placement import PeCursor, raw_const, tensor_placement
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp
from kernbench.ir.model import QBits
from kernbench.numerics.dtypes import bits as dtype_bits

#: CMDQ `qbits` of an HBM dtype
QBITS_OF = {n: dtype_bits(n) for n in ("fp32", "fp16", "bf16", "int8", "uint8", "int4", "int32",
                                       "bool", "int16")}

#: (storage key, first byte, end of hull, row stride, row bytes)
HbmRange = tuple[str, int, int, int, int]
#: TCM operands of a tile op by role ("in", "out", "ifm", "wgt", "ofm", "scale", ...)
Operands = Sequence[tuple[str, Buf]]


class TeWeight(NamedTuple):
    """A TE weight as stored for the tiles: its placement, the per-column (or per-tensor)
    scale of an integer weight (None otherwise) and its bits."""

    placement: Placement
    scale: np.ndarray | None
    bits: int


class PreparedX(NamedTuple):
    """A TE activation as the tiles read it ((M, K) int8 / fp16 / fp32) and its static
    scale (integer mode) or None."""

    placement: Placement
    scale: np.ndarray | None


def hbm_range(p: Placement, elem_off: int, rows: int, row_elems: int,
              row_stride: int) -> HbmRange:
    """A strided HBM byte range exact enough that two column blocks of the same rows do
    not look overlapping."""
    isz = ITEMSIZE[p.dtype]
    start = p.addr + int(elem_off * isz)
    end = p.addr + int(math.ceil((elem_off + (rows - 1) * row_stride + row_elems) * isz))
    if rows == 1 or row_stride == row_elems:
        return (p.key, start, end, end - start, end - start)
    return (p.key, start, end, int(row_stride * isz), int(math.ceil(row_elems * isz)))


class Lowering:
    """Builds the TileGraph of one compile (see the module docstring)."""

    def __init__(self, state: CompileState) -> None:
        self.state = state
        self.g = state.graph
        self.topo = state.topology
        self.plan = state.require_memory()
        pt = self.topo.config.cube.pe_template
        self.gemm_spec = pt.pe_gemm
        self.math_op_cycles = pt.pe_math.op_cycles
        tcm = pt.pe_tcm
        self.bank = tcm.capacity_kib * 1024 // tcm.banks
        self.tcm_bytes = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        self.n_pes = len(self.topo.pes)
        self.tg = TileGraph()
        self.pes = PeCursor(self.n_pes, restart_per_layer=len(self.topo.cubes) > 1)
        self.stream = 0
        self.per_channel = (self.g.qconfig or {}).get("weight_granularity",
                                                      "per_channel") == "per_channel"
        self.prepared: dict[tuple[str, str, int], PreparedX | None] = {}
        self.weights: dict[tuple[str, str, QBits], TeWeight | None] = {}

    def next_pe(self) -> int:
        return self.pes.next()

    def phase(self) -> None:
        """Ops after this point may depend on any op before it (placement keeps order)."""
        self.stream += 1

    def cube(self, pe: int) -> int:
        return self.topo.pes[pe].cube.index

    def placement(self, tid: str) -> Placement:
        return tensor_placement(self.g, self.plan, tid)

    def raw_const(self, tid: str) -> Placement:
        return raw_const(self.g, self.plan, tid)

    def const(self, key: str, array: np.ndarray, dtype: str, source: str | None = None,
              shape: tuple[int, ...] | None = None) -> Placement:
        return self.plan.constant(key, array, dtype, source=source, shape=shape)

    def buf(self, pe: int, nbytes: float, label: str) -> Buf:
        b = Buf(len(self.tg.bufs), pe, max(int(math.ceil(nbytes)), 1), label)
        if b.nbytes > self.bank:
            raise ValueError(f"{label}: {b.nbytes} B does not fit a {self.bank}-byte TCM bank")
        self.tg.bufs.append(b)
        return b

    def op(self, opcode: str, pe: int, layer: str, fields: dict[str, Any], *,
           reads: Operands = (), writes: Operands = (), hbm_reads: Sequence[HbmRange] = (),
           hbm_writes: Sequence[HbmRange] = (), frees: Sequence[Buf] = ()) -> TileOp:
        o = TileOp(opcode, pe, layer, fields, list(reads), list(writes), list(hbm_reads),
                   list(hbm_writes), list(frees), self.stream)
        self.tg.ops.append(o)
        self.tg.layer_tiles[layer] = self.tg.layer_tiles.get(layer, 0) + 1
        return o

    def dma(self, write: bool, pe: int, b: Buf, p: Placement, elem_off: int, rows: int,
            row_elems: int, row_stride: int, layer: str, role: str = "activation",
            frees: Sequence[Buf] = ()) -> TileOp:
        """DMA_STORE_TILE (write) or DMA_LOAD_TILE of `rows` rows of `row_elems` elements,
        `row_stride` elements apart, from element `elem_off` of placement `p`."""
        isz = ITEMSIZE[p.dtype]
        fields = {"tensor_role": role, "qbits": QBITS_OF[p.dtype],
                  "dram_addr": p.addr_in(self.cube(pe)) + int(elem_off * isz),
                  "num_elements": rows * row_elems}
        if rows > 1 and row_stride != row_elems:
            fields["stride_bytes"] = int(row_stride * isz)
            fields["rows"] = rows
        rng = hbm_range(p, elem_off, rows, row_elems, row_stride)
        if write:
            return self.op("DMA_STORE_TILE", pe, layer, fields, reads=[("spm", b)],
                           hbm_writes=[rng], frees=frees)
        return self.op("DMA_LOAD_TILE", pe, layer, fields, writes=[("spm", b)],
                       hbm_reads=[rng], frees=frees)
