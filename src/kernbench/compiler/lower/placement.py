"""Where tiles run and where the data they touch lives.

- PEs: tiles go round-robin over all PEs with one counter across layers, so small layers
  spread too; the K loop of one GEMM output tile stays on one PE. On a multi-cube NPU
  every layer's tiles start again at PE 0 (cube 0, where unspread activations live): a
  small layer stays near its data, a big one still spreads over all PEs (on one cube a
  counter that rotates across layers balances the PEs better; each layer starts where the
  lowering plan says, `first_pe`: the PEs the layers before it draw). A tile whose rows live in
  one part of a spread storage goes round-robin over the PEs of that part's cube
  (`next(cube)`), so it reads and writes locally. A layer of one tile runs on the PE the
  lowering plan gives it (`lone_plan`: a rotation of its own per cube, across layers).
- Data: the HBM placement of a tensor a tile reads; a constant is placed on first use as
  it is stored in the IR (a lowering that wants another representation, e.g. int8 TE
  weights, places its own constant; a vector tile reads a quantized constant as its real
  value, `real_const`).
- Views: a reshape / transpose / identity whose output shares its source's storage
  takes no operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, MemoryPlan, Placement
from kernbench.ir.model import Graph, LayerIR
from kernbench.numerics import quant as qmath


@dataclass
class PeCursor:
    """The PE the next tile goes to (any PE, or one of a given cube's PEs)."""

    n_pes: int
    restart_per_layer: bool  # multi-cube NPUs: every layer starts again at PE 0
    cube_pes: tuple[tuple[int, ...], ...] = ()  # PE indices of each cube
    position: int = 0
    in_cube: dict[int, int] = field(default_factory=dict)

    def next(self, cube: int | None = None) -> int:
        if cube is not None and self.cube_pes:
            pes = self.cube_pes[cube]
            i = self.in_cube.get(cube, 0)
            self.in_cube[cube] = i + 1
            return pes[i % len(pes)]
        pe = self.position % self.n_pes
        self.position += 1
        return pe

    def start_layer(self) -> None:
        if self.restart_per_layer:
            self.position = 0
            self.in_cube.clear()


def raw_const(g: Graph, plan: MemoryPlan, tid: str) -> Placement:
    """A constant as the IR stores it (int4 held as int8), placed on first use."""
    p = plan.placements.get(tid)
    if p is not None:
        return p
    arr = np.asarray(g.weights[tid])
    dt = g.tensors[tid].dtype
    if dt == "int4":
        dt = "int8"
    if dt not in ITEMSIZE:
        dt = {np.dtype(np.float32): "fp32", np.dtype(np.int64): "int64"}.get(arr.dtype, "fp32")
    p = plan.constant(tid, arr, dt, source=tid)
    plan.placements[tid] = p
    return p


def real_const(g: Graph, plan: MemoryPlan, tid: str) -> Placement:
    """A constant as the value it stands for: a quantized one (integers with a scale and
    zero point) dequantized to fp32 by the interpreter's rule (`numerics.quant.dequantize`),
    any other one as stored (`raw_const`). Vector tiles read this: they compute on reals."""
    q = g.tensors[tid].quant
    if q is None:
        return raw_const(g, plan, tid)
    key = f"{tid}@real"
    p = plan.placements.get(key)
    if p is None:
        zp = g.weights[q.zero_point] if q.zero_point else 0
        real = qmath.dequantize(np.asarray(g.weights[tid]), g.weights[q.scale], zp, q.axis,
                                q.block_size)
        p = plan.constant(key, real, "fp32", source=tid)
        plan.placements[key] = p
    return p


def tensor_placement(g: Graph, plan: MemoryPlan, tid: str) -> Placement:
    """Where a tensor a tile reads lives (constants placed on first use)."""
    if g.tensors[tid].const:
        return raw_const(g, plan, tid)
    return plan.placements[tid]


def is_view(plan: MemoryPlan, n: LayerIR) -> bool:
    """A RESHAPE / TRANSPOSE / IDENTITY whose output aliases its input's storage."""
    if n.op_type not in ("RESHAPE", "TRANSPOSE", "IDENTITY"):
        return False
    src = plan.placements.get(n.inputs[0])
    out = plan.placements.get(n.outputs[0])
    return src is not None and out is not None and src.key == out.key


def sole_consumer(g: Graph, plan: MemoryPlan,
                  tid: str) -> tuple[LayerIR, tuple[str, ...]] | None:
    """(the one consumer, the chain) of `tid`, following views that alias it (`is_view`):
    the chain is `tid` and the views' outputs on the way, its last tensor the one the
    consumer reads (the views are the chain's producers after the first). None when any
    tensor on the way has more than one consumer or is a graph output, or a view reads it
    other than as its input."""
    chain = [tid]
    while True:
        t = g.tensors[tid]
        if tid in g.outputs or len(t.consumers) != 1:
            return None
        c = g.node(t.consumers[0])
        if not is_view(plan, c):
            return c, tuple(chain)
        if c.inputs[0] != tid or len(c.outputs) != 1:
            return None
        tid = c.outputs[0]
        chain.append(tid)
