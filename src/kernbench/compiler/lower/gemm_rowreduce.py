"""One PE adds up a one-row split-K GEMM and runs the norm that reads it.

In a decode step the down projection (FC2: one row, K = 3072, split K, parts placed by
readiness) is followed by the residual ADD (fused into its epilogue) and the
next block's LayerNorm. With an owner per output tile, each of the 24 owners loads its
tile's partial sums, adds them, runs the epilogue and stores its 32 columns, and then
one PE loads the whole row for the norm: two hand-offs (a store, a command trip, a load)
in a row on every block's critical path. Here every part stores its partial sum, and one
PE, the reducer, loads all of them with one DMA, adds them (VE_ELEMENTWISE_TILE add,
int32, exact), runs the epilogue on the whole row (dequantize, bias, the fused residual
ADD) and then the norm and its quantize for the next GEMM (`xquant`), one chain of vector
ops (`fuse_vector`). One hand-off is left.

Slots: the scratch holds one row of N columns per slot, as many slots as the tile with
the most parts; a tile's parts take slots 0, 1, ... (its owner the last). A tile with
fewer parts leaves its higher slots at the zeros deployed with the scratch, so the
reducer adds every slot over the whole row. The values are the owner's: the same int32
sum (addition is exact, in any order), then the same vector ops on the same values.

Used when the GEMM's output is one row, its tiles are split, its epilogue fuses a step
whose output a tileable LAYER_NORM / RMS_NORM reads directly, and the output is not
spread over cubes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm_balance import STEP_TRIP_CYCLES, KPart
from kernbench.compiler.lower.gemm_splitk import PerPe, most_parts
from kernbench.compiler.lower.row_spec import RowSpec, row_spec
from kernbench.compiler.lower.values import FusedStep
from kernbench.compiler.lower.xquant import QuantOut, drop_unwritten, quant_out, store_tile
from kernbench.compiler.tilegraph import Buf
from kernbench.compiler.tiling import GemmTiles
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_KINDS

#: reduce one-row split-K GEMMs on one PE with the norm after them (False: an owner per
#: tile; `benchmarks/decode_ablation.py` measures both)
ROW_REDUCE = True

#: most K parts per output tile `split` tries, and the K granularity of a part
MAX_PARTS = 8
K_ALIGN = 32


@dataclass(frozen=True)
class RowReduce:
    """The reducer `pe`, the int32 scratch of `slots` partial rows (in the reducer's
    cube), and the `norm` layer it runs after the epilogue (`spec`: how it tiles; `q`:
    the quantized copy its integer GEMM readers take, `xquant.quant_out`)."""

    pe: int
    slots: int
    scratch: Placement
    norm: LayerIR
    spec: RowSpec
    q: QuantOut | None


#: the norm a row reduction runs, and how it tiles (`row_spec.row_spec`)
Norm = tuple[LayerIR, RowSpec]


def norm_after(lw: Lowering, step: FusedStep | None, op: Placement, m: int,
               nn: int) -> Norm | None:
    """The norm a GEMM with this fused `step` and output `op` of `m` rows × `nn` columns
    would be reduced on one PE with (module doc), or None when it cannot be: the one
    LAYER_NORM / RMS_NORM reading the step's output directly, tiled as a row op."""
    if not ROW_REDUCE or step is None or m != 1 or op.parts or step.out.parts \
            or nn * 4 > lw.bank:
        return None
    y = step.layer.outputs[0]
    norms = [lw.g.node(c) for c in lw.g.tensors[y].consumers
             if lw.g.node(c).op_type in ("LAYER_NORM", "RMS_NORM")
             and lw.g.node(c).inputs[0] == y]
    if len(norms) != 1 or norms[0].id in lw.row_reduced:
        return None
    spec = row_spec(lw, norms[0])
    if spec is None or spec.x.key != step.out.key or spec.x.shape[-1] != nn:
        return None
    return norms[0], spec


def split(lw: Lowering, t: GemmTiles, tiles: int, k: int, bits: int, n_pes: int) -> GemmTiles:
    """The K parts per tile of a one-row GEMM that will be reduced on one PE: the
    reduction is paid anyway (it replaces the norm's gather), so the parts are chosen by
    the tensor engines' estimated time alone: waves of parts over the PEs' engines, each
    part one K step of its array cycles plus a command round trip. `t` (as the tiler
    chose it) stands unless a split is estimated faster."""
    engines = n_pes * lw.engines.te_count
    spec = lw.gemm_spec

    def est(tk: int, parts: int) -> int:
        steps = math.ceil(k / tk) // parts  # K steps per part
        waves = math.ceil(tiles * parts / engines)
        return waves * steps * (gemm_cycles(spec, t.tm, t.tn, tk, bits) + STEP_TRIP_CYCLES)

    best, out = est(t.tk, t.ks), t
    for ks in range(2, MAX_PARTS + 1):
        if ks * tiles * t.tn * 4 > lw.bank:
            break  # the reducer loads every slot of the row into one TCM bank (`plan`)
        tk = math.ceil(k / ks / K_ALIGN) * K_ALIGN
        if tk >= k or math.ceil(k / tk) != ks:
            continue
        e = est(tk, ks)
        if e < best:
            best, out = e, GemmTiles(t.tm, t.tn, tk, ks)
    return out


def plan(lw: Lowering, n: LayerIR, step: FusedStep, nn: int, per_pe: PerPe,
         found: Norm) -> RowReduce | None:
    """The row reduction of GEMM `n` into the norm `found` (`norm_after`), its parts
    placed, or None when its tiles are not split (or all slots of the row would not fit
    one TCM bank). Picks the reducer, allocates the scratch and the norm's quantized
    copy."""
    slots = most_parts(per_pe)
    if slots < 2 or slots * nn * 4 > lw.bank:
        return None
    norm, spec = found
    # in the cube holding the output row (its residual operand and the norm's readers'
    # copy are there too), the PE with the fewest K columns of its own: it is free
    # soonest (lowest index on a tie, so the choice is deterministic)
    home = lw.home_cube(step.out)
    pes = lw.pes.cube_pes[home] if home is not None and lw.pes.cube_pes else range(lw.n_pes)
    work = {pe: sum(p.k1 - p.k0 for p in parts) for pe, (_, parts) in per_pe.items()}
    pe = min(pes, key=lambda i: (work.get(i, 0), i))
    scratch = lw.plan.allocate(f"{n.id}@rowsum{len(lw.plan.allocations)}", (1, slots * nn),
                               "int32", "scratch", cube=lw.cube(pe),
                               data=np.zeros((1, slots * nn), np.int32)).placement()
    return RowReduce(pe, slots, scratch, norm, spec, quant_out(lw, norm.outputs[0]))


def store_part(lw: Lowering, n: LayerIR, pe: int, c: Buf, t: GemmTiles, part: KPart,
               rr: RowReduce, nn: int) -> None:
    """A part's int32 partial sum into its slot (the owner's is the tile's last)."""
    _, n0, _, tn = part.tile
    slot = part.slot if part.slot >= 0 else part.count(t.ks) - 1
    lw.dma(True, pe, c, rr.scratch, slot * nn + n0, 1, tn, tn, n.id, frees=[c])


def sum_row(lw: Lowering, n: LayerIR, rr: RowReduce, nn: int,
            engine: dict[str, Any]) -> Buf:
    """On the reducer, after every part's store (a phase of its own): one DMA loads all
    slots, and the adds leave the row's int32 sum in a buffer."""
    lw.phase()
    pe = rr.pe
    both = lw.buf(pe, rr.slots * nn * 4, f"{n.id}.partials")
    lw.dma(False, pe, both, rr.scratch, 0, 1, rr.slots * nn, rr.slots * nn, n.id)
    c = both
    for slot in range(1, rr.slots):
        total = lw.buf(pe, nn * 4, f"{n.id}.acc")
        last = slot == rr.slots - 1
        add = lw.op("VE_ELEMENTWISE_TILE", pe, n.id,
                    {"op": "add", "cost": EW_KINDS["add"].cost,
                     "out_shape": [1, nn], "out_dtype": "int32", "in_shape": [1, nn],
                     "in_dtype": "int32", "in2_shape": [1, nn], "in2_dtype": "int32",
                     **engine},
                    reads=[("in", c), ("in2", both)], writes=[("out", total)],
                    frees=([c] if c is not both else []) + ([both] if last else []))
        add.role_offset = {"in2": slot * nn * 4}
        c = total
    return c


def norm(lw: Lowering, rr: RowReduce, c: Buf, gemm_id: str, engine: dict[str, Any]) -> None:
    """The norm on the epilogue's row `c` (still in TCM; the caller stores and frees it):
    its parameters loaded, the VE tile, and its output stored as the row lowering would
    (quantized for its integer GEMM readers first, `xquant.store_tile`)."""
    pe, layer = rr.pe, rr.norm.id
    opcode, _, y, fields, extra = rr.spec
    cols = y.shape[-1]
    reads, frees, ops = [("in", c)], [], []
    for role, p, _ in extra:  # gamma / beta: one row each
        be = lw.buf(pe, cols * ITEMSIZE[p.dtype], f"{layer}.{role}")
        ops.append(lw.dma(False, pe, be, p, 0, 1, cols, cols, layer, role="weight"))
        reads.append((role, be))
        frees.append(be)
    bo = lw.buf(pe, cols * ITEMSIZE[y.dtype], f"{layer}.out")
    ops.append(lw.op(opcode, pe, layer, dict(fields, rows=1, **engine), reads=reads,
                     writes=[("out", bo)], frees=frees))
    ops += store_tile(lw, rr.q, pe, bo, y, layer, 0, 1, cols, cols, engine, [bo])
    for o in ops:
        o.fused_into = gemm_id


def done(lw: Lowering, n: LayerIR, rr: RowReduce) -> None:
    """After the GEMM: the norm is lowered no further, and its float output loses its
    storage when only the quantized copy is read (`xquant.drop_unwritten`)."""
    lw.row_reduced[rr.norm.id] = n.id
    drop_unwritten(lw, rr.q)
