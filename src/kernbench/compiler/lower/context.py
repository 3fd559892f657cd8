"""The state every lowering shares: the TileGraph being built and how to add to it.

A `Lowering` holds the graph, the memory plan, the TCM geometry and the PE cursor, and
builds tile operations: `buf` (a symbolic TCM buffer, at most one bank), `op` (a tile op in
the current phase), `dma` (a 1-D or 2-D strided DMA between a TCM buffer and a placement),
`const` (a replicated constant in HBM), and chooses PEs near the data (`pe_near`,
`row_blocks`: a tile of a spread storage's rows runs in the cube holding them; a DMA
crossing parts is split into one DMA per run). `phase()` starts a new lowering phase: the
placement pass never moves an op across a phase boundary, so ops after it may depend on
any op before it. The decisions that span several ops come from the lowering plan
(`lowering_plan`, made by the plan pass). What a lowering module remembers from one layer
to the next (the GEMM's memo of the activations it converted, the last GEMM's column
readiness) is that module's own state (`local`), read by no other module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import numpy as np

from kernbench.compiler.hbm import BFP_FORMATS, ITEMSIZE, Placement
from kernbench.compiler.lower.engines import EngineCursor
from kernbench.compiler.lower.placement import PeCursor, raw_const, real_const, tensor_placement
from kernbench.compiler.lower.plan import LoweringPlan
from kernbench.compiler.lower.values import HbmRange, Operands
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp
from kernbench.numerics.dtypes import bits as dtype_bits
from kernbench.topology.peaks import hbm_gbs_per_cube, pe_macs_per_ns, ucie_gbs

#: CMDQ `qbits` of an HBM dtype
QBITS_OF = {n: dtype_bits(n) for n in ("fp32", "fp16", "bf16", "int8", "uint8", "int4", "int32",
                                       "bool", "int16")}

S = TypeVar("S")

#: the float HBM dtypes the vector tiles read and write (16-bit ones widen to fp32)
FLOAT_DTYPES = ("fp32", "fp16", "bf16")


def mixed_halves(*dtypes: str | None) -> bool:
    """Do `dtypes` hold both fp16 and bf16? One tile names one 16-bit float format."""
    return {"fp16", "bf16"} <= set(dtypes)


def float_format(*dtypes: str | None) -> dict[str, str]:
    """The CMDQ field naming the format of a tile's 16-bit float operands: {"f16_format":
    "bf16"} when one of `dtypes` is bf16, else nothing (16-bit floats are fp16)."""
    return {"f16_format": "bf16"} if "bf16" in dtypes else {}


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
        self.lowering_plan: LoweringPlan = state.require_lowering_plan()
        pt = self.topo.config.cube.pe_template
        self.gemm_spec = pt.pe_gemm
        self.math_op_cycles = pt.pe_math.op_cycles
        tcm = pt.pe_tcm
        self.bank = tcm.capacity_kib * 1024 // tcm.banks
        self.tcm_bytes = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        self.n_pes = len(self.topo.pes)
        # a PE's share of its cube's HBM bandwidth when every PE of the cube loads at
        # once (bytes per engine cycle): what the tiler weighs loads with
        cs = self.topo.config.cube
        per_pe_gbs = min(cs.links.pe_router_bw_gbs,
                         hbm_gbs_per_cube(self.topo) / max(1, self.n_pes // len(self.topo.cubes)))
        self.dma_bytes_per_cycle = per_pe_gbs / pt.pe_gemm.clock_ghz
        self.ucie_bytes_per_cycle = ucie_gbs(self.topo) / pt.pe_gemm.clock_ghz
        self.pe_macs_per_cycle = pe_macs_per_ns(pt.pe_gemm, 8) / pt.pe_gemm.clock_ghz
        self.tg = TileGraph()
        self._next_buf = 0  # buffer ids stay unique when a streamed compile clears tg.bufs
        cube_pes: dict[int, list[int]] = {}
        for i, pe in enumerate(self.topo.pes):
            cube_pes.setdefault(pe.cube.index, []).append(i)
        self.pes = PeCursor(self.n_pes, restart_per_layer=len(self.topo.cubes) > 1,
                            cube_pes=tuple(tuple(cube_pes[c]) for c in sorted(cube_pes)))
        self.stream = 0
        self.engines = EngineCursor.of(pt)
        self._local: dict[type, object] = {}

    def local(self, kind: type[S]) -> S:
        """The state of type `kind` that one lowering module keeps from one layer to the
        next (a memo of what its earlier tiles made), created empty on first ask. Only
        the module defining `kind` asks for it: no other lowering reads it."""
        held = self._local.get(kind)
        if held is None:
            held = self._local[kind] = kind()
        return cast(S, held)

    def lone_pe(self, layer: str, pe: int) -> int:
        """The PE layer `layer`, made of one tile, runs on: the lowering plan's (`lone`,
        `lone_plan`), which must lie in the cube of `pe`, the PE the round-robin gave."""
        planned = self.lowering_plan.lone.get(layer)
        if planned is None or self.cube(planned) != self.cube(pe):
            raise RuntimeError(f"{layer}: its tiles make one tile in cube {self.cube(pe)}, "
                               "yet the lowering plan gives it "
                               + ("no PE of one tile" if planned is None
                                  else f"PE {planned} of cube {self.cube(planned)}"))
        self.tg.lone[layer] = planned
        return planned

    def start_layer(self, layer: str) -> int:
        """Start the tiles of `layer` (an op of its own): on one cube the round-robin
        continues at the lowering plan's first PE of the layer (`first_pe`; a layer the
        plan gives none is refused); on several cubes where it restarted. Returns the
        cursor's position (`TileGraph.drawn` counts from it)."""
        if not self.pes.restart_per_layer:
            planned = self.lowering_plan.first_pe.get(layer)
            if planned is None:
                raise RuntimeError(f"{layer}: the lowering plan gives it no first PE")
            self.pes.position = planned
        return self.pes.position

    def next_pe(self) -> int:
        return self.pes.next()

    def cube_of_addr(self, phys: int) -> int:
        return phys // self.plan.cube_bytes

    def home_cube(self, p: Placement) -> int | None:
        """The cube holding a whole (unspread, unreplicated) placement on a multi-cube NPU;
        None on one cube, for replicated data (every cube has it) and spread data."""
        if len(self.topo.cubes) == 1 or p.parts or p.replicas:
            return None
        return self.cube_of_addr(p.addr)

    def cube_near(self, p: Placement, elem_off: int) -> int | None:
        """The cube holding element `elem_off` of `p` (None when every cube holds it)."""
        if not p.parts:
            return self.home_cube(p)
        logical = p.addr + int(elem_off * ITEMSIZE[p.dtype])
        return self.cube_of_addr(p.physical(logical))

    def pe_near(self, p: Placement, elem_off: int) -> int:
        """The next PE of the cube holding element `elem_off` of `p` (any PE when every
        cube holds it)."""
        return self.pes.next(self.cube_near(p, elem_off))

    def part_rows(self, p: Placement, rows: int,
                  cols: int) -> list[tuple[int, int, int | None]]:
        """(first row, end row, cube) of each part of a contiguous rows × cols placement;
        one range in its home cube (`home_cube`) if it is not spread."""
        if not (p.parts and p.contiguous):
            return [(0, rows, self.home_cube(p))]
        isz = ITEMSIZE[p.dtype]
        out = []
        for lo, hi, phys in p.parts:
            r0 = int((lo - p.addr) // (cols * isz))
            r1 = min(rows, int(math.ceil((hi - p.addr) / (cols * isz))))
            out.append((r0, r1, self.cube_of_addr(phys)))
        return out

    def pes_of(self, cube: int | None) -> int:
        """How many PEs tiles sent to `cube` (None: any cube) spread over."""
        return self.n_pes if cube is None else len(self.pes.cube_pes[cube])

    def row_spans(self, p: Placement, rows: int, cols: int, max_rows: int,
                  split: int = 1) -> list[tuple[int, int, int | None]]:
        """(first row, rows, cube) blocks of a rows × cols contiguous tensor: at most
        `max_rows` rows, as many as the PEs of its home cube (of all PEs when replicated
        or on one cube) take; over a spread placement, blocks stay inside one part and
        name that part's cube. A function of the placement and the shapes (the plan asks
        it too); `row_blocks` gives them their PEs."""
        out: list[tuple[int, int, int | None]] = []
        for r_lo, r_hi, cube in self.part_rows(p, rows, cols):
            n_split = self.pes_of(cube) * split  # `split` blocks per PE (its VEs)
            per = max(1, min(r_hi - r_lo, max_rows, math.ceil((r_hi - r_lo) / n_split)))
            for r0 in range(r_lo, r_hi, per):
                out.append((r0, min(per, r_hi - r0), cube))
        return out

    def row_blocks(self, p: Placement, rows: int, cols: int, max_rows: int,
                   split: int = 1) -> list[tuple[int, int, int]]:
        """(first row, rows, PE) blocks of `row_spans`: round-robin over the PEs of each
        block's cube (any PE when it names none)."""
        return self.spans_on_pes(self.row_spans(p, rows, cols, max_rows, split))

    def spans_on_pes(self, spans: Sequence[tuple[int, int, int | None]]
                     ) -> list[tuple[int, int, int]]:
        """`row_spans` blocks, each on the next PE of its cube."""
        return [(r0, r, self.pes.next(cube)) for r0, r, cube in spans]

    def lone_cube(self, cube: int | None) -> int:
        """The cube a layer's one tile runs in when its block names `cube`: that cube, or,
        for a block any PE may take, the cube of the PE the round-robin gives a layer's
        first tile (one cube; several cubes restart every layer at PE 0)."""
        return cube if cube is not None else self.cube(0)
    def phase(self) -> None:
        """Ops after this point may depend on any op before it (placement keeps order)."""
        self.stream += 1

    def cube(self, pe: int) -> int:
        return self.topo.pes[pe].cube.index

    def placement(self, tid: str) -> Placement:
        if tid in self.lowering_plan.unwritten and tid not in self.plan.placements:
            # its producer's tiles dropped it (`forget`): a lowering broke the plan
            raise RuntimeError(f"{tid}: stored only quantized, yet read as float")
        return tensor_placement(self.g, self.plan, tid)

    def forget(self, chain: Sequence[str]) -> None:
        """After its producer's tiles: a tensor no tile writes (the lowering plan's
        `unwritten`: a fused GEMM's output, a float only read quantized) and the views of
        it in `chain` (`placement.sole_consumer`: each tensor after the first is a view
        node's output) leave the memory plan: no storage (unless reuse gave their bytes to
        a later tensor) and no view in memory.json, so `--dump-intermediates` does not
        compare them; the view nodes (the plan's `fused`) stay views in the roofline
        (`TileGraph.views`)."""
        if not set(chain) <= self.lowering_plan.unwritten:
            raise RuntimeError(f"{chain[0]}: its tiles leave it unwritten, yet the lowering "
                               "plan does not")
        keys = {self.plan.placements.pop(t).key for t in chain if t in self.plan.placements}
        for t in chain[1:]:
            v = self.g.tensors[t].producer
            assert v is not None
            self.tg.views.add(v)
        for key in keys:
            if not any(p.key == key for p in self.plan.placements.values()):
                self.plan.allocations.pop(key, None)

    def raw_const(self, tid: str) -> Placement:
        return raw_const(self.g, self.plan, tid)

    def real_const(self, tid: str) -> Placement:
        return real_const(self.g, self.plan, tid)

    def value_placement(self, tid: str) -> Placement:
        """Where a vector tile reads `tid`'s real values: a quantized constant
        dequantized (`real_const`), any other tensor where it lives (`placement`)."""
        t = self.g.tensors[tid]
        return self.real_const(tid) if t.const and t.quant is not None else self.placement(tid)

    def const(self, key: str, array: np.ndarray, dtype: str, source: str | None = None,
              shape: tuple[int, ...] | None = None,
              home: Sequence[tuple[int, int]] = ()) -> Placement:
        return self.plan.constant(key, array, dtype, source=source, shape=shape, home=home)

    def buf(self, pe: int, nbytes: float, label: str) -> Buf:
        b = Buf(self._next_buf, pe, max(int(math.ceil(nbytes)), 1), label)
        self._next_buf += 1
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
            frees: Sequence[Buf] = (), buf_offset: int = 0, cube: int | None = None) -> TileOp:
        """DMA_STORE_TILE (write) or DMA_LOAD_TILE of `rows` rows of `row_elems` elements,
        `row_stride` elements apart, from element `elem_off` of placement `p`, to or from
        `buf_offset` bytes into buffer `b`. A replicated `p` is reached in the PE's own
        cube, or in `cube`'s copy when given."""
        if p.parts:
            return self._split_dma(write, pe, b, p, elem_off, rows, row_elems, row_stride,
                                   layer, role, frees, buf_offset)
        isz = ITEMSIZE[p.dtype]
        home = self.cube(pe) if cube is None else cube
        return self._dma_op(write, pe, b, p, p.addr_in(home) + int(elem_off * isz),
                            elem_off, rows, row_elems, row_stride, layer, role, frees,
                            buf_offset)

    def _dma_op(self, write: bool, pe: int, b: Buf, p: Placement, dram_addr: int,
                elem_off: int, rows: int, row_elems: int, row_stride: int, layer: str,
                role: str, frees: Sequence[Buf], buf_offset: int = 0) -> TileOp:
        # a 64-bit element (int64 ids, position ids) moves as two 32-bit ones: DMA qbits
        # stop at 32, and a DMA only counts bytes
        if p.dtype in BFP_FORMATS:  # block floats load decoded into bf16 (DMA block_float)
            if write:
                raise ValueError(f"{layer}: a {p.dtype} tensor is not stored by a tile")
            wide = 1
            fields = {"tensor_role": role, "qbits": 16, "dram_addr": dram_addr,
                      "num_elements": rows * row_elems, "block_float": p.dtype}
        else:
            wide = 2 if dtype_bits(p.dtype) == 64 else 1
            fields = {"tensor_role": role, "qbits": 32 if wide == 2 else QBITS_OF[p.dtype],
                      "dram_addr": dram_addr, "num_elements": rows * row_elems * wide}
        if rows > 1 and row_stride != row_elems:
            fields["stride_bytes"] = int(row_stride * ITEMSIZE[p.dtype])
            fields["rows"] = rows
        rng = hbm_range(p, elem_off, rows, row_elems, row_stride)
        if write:
            o = self.op("DMA_STORE_TILE", pe, layer, fields, reads=[("spm", b)],
                        hbm_writes=[rng], frees=frees)
        else:
            o = self.op("DMA_LOAD_TILE", pe, layer, fields, writes=[("spm", b)],
                        hbm_reads=[rng], frees=frees)
        o.buf_offset = buf_offset
        return o

    def _split_dma(self, write: bool, pe: int, b: Buf, p: Placement, elem_off: int,
                   rows: int, row_elems: int, row_stride: int, layer: str, role: str,
                   frees: Sequence[Buf], buf_offset: int = 0) -> TileOp:
        """A DMA over a spread placement: one DMA per run inside one part, each at its
        offset in the buffer (the last one frees)."""
        isz = ITEMSIZE[p.dtype]
        runs = p.runs(elem_off, rows, row_elems, row_stride)
        o = None
        for i, (r0, nr, e0, ne) in enumerate(runs):
            off = elem_off + r0 * row_stride + e0
            phys = p.physical(p.addr + int(off * isz))
            o = self._dma_op(write, pe, b, p, phys, off, nr, ne, row_stride, layer, role,
                             frees if i == len(runs) - 1 else (),
                             buf_offset=buf_offset + int((r0 * row_elems + e0) * isz))
        assert o is not None
        return o
