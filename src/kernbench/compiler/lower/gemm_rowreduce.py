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
spread over cubes. The plan pass decides it (`planned_norm`, the lowering plan's `norms`)
from the K parts `gemm_parts.range_tiles` cuts; the GEMM's tiles carry it out, and a
readiness placement of the parts (`gemm_splitk.balanced`) is taken only when it keeps at
least two parts a tile and every slot in one bank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.activation import te_mode
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm_balance import KPart
from kernbench.compiler.lower.gemm_cubes import gemm_ranges
from kernbench.compiler.lower.gemm_outputs import tiled_outputs
from kernbench.compiler.lower.gemm_parts import range_tiles
from kernbench.compiler.lower.gemm_splitk import PerPe, most_parts
from kernbench.compiler.lower.row_spec import RowSpec, row_spec
from kernbench.compiler.lower.te_weights import te_weight
from kernbench.compiler.lower.values import FusedStep, NormAfter
from kernbench.compiler.lower.xquant import QuantOut, drop_unwritten, quant_out, store_tile
from kernbench.compiler.tilegraph import Buf
from kernbench.compiler.tiling import GemmTiles
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import EW_KINDS

#: reduce one-row split-K GEMMs on one PE with the norm after them (False: an owner per
#: tile; `benchmarks/decode_ablation.py` measures both)
ROW_REDUCE = True

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
    if len(norms) != 1:
        return None
    spec = row_spec(lw, norms[0])
    if spec is None or spec.x.key != step.out.key or spec.x.shape[-1] != nn:
        return None
    return norms[0], spec


def planned_norm(lw: Lowering, n: LayerIR) -> NormAfter | None:
    """The norm after the epilogue of GEMM `n` (`norm_after`) and whether one PE adds the
    row up and runs it: the GEMM's K parts, as `gemm_parts.range_tiles` cuts them for a
    reduction, are at least two and every slot of the row fits one TCM bank. None: no
    norm can follow (no fused step, an integer store of the step's output for the next
    GEMM, a 16-bit integer operand, more than one row). The plan pass asks; it reads the
    graph and the plans (the norm's row spec places its parameters on a copy)."""
    step = lw.lowering_plan.epilogue.get(n.id)
    mode = te_mode(n)
    if n.op_type != "GEMM" or step is None or mode is None or mode == "int16" \
            or step.layer.outputs[0] in lw.lowering_plan.quant_stores:
        return None
    _, outs = tiled_outputs(lw, n)
    if not outs:
        return None
    out = outs[0]
    found = norm_after(lw, step, out.placement, out.m, out.nn)
    wp = te_weight(lw, n, n.inputs[1], mode)
    if found is None or wp is None:
        return None
    k, nn = wp.shape
    # the activation as the TE reads it: only int8 against int8 / int4 splits K
    a_dtype = "int8" if mode == "int" and n.qbits_activation == 8 else "fp32"
    parts = max(range_tiles(lw, a_dtype, wp.dtype, wp.bits, hi - lo, nn, k, cube,
                            row_reduce=True).ks
                for lo, hi, cube in gemm_ranges(lw, a_dtype, wp, out.placement, out.m, nn,
                                                k, nn))
    return NormAfter(found[0].id, parts, parts >= 2 and parts * nn * 4 <= lw.bank)


def norm_of(lw: Lowering, after: NormAfter) -> Norm:
    """The norm the lowering plan names after a GEMM's epilogue, and how it tiles (its
    row spec places its parameters now: the reducer loads them)."""
    norm = lw.g.node(after.norm)
    spec = row_spec(lw, norm)
    if spec is None:
        raise RuntimeError(f"{norm.id}: the lowering plan runs it after a GEMM's epilogue, "
                           "yet it is no row op")
    return norm, spec


def plan(lw: Lowering, n: LayerIR, step: FusedStep, nn: int, per_pe: PerPe,
         found: Norm) -> RowReduce:
    """The row reduction of GEMM `n` into the norm `found` the lowering plan names, its
    parts placed. Picks the reducer, allocates the scratch and the norm's quantized
    copy."""
    slots = most_parts(per_pe)
    if slots < 2 or slots * nn * 4 > lw.bank:
        raise RuntimeError(f"{n.id}: the lowering plan has one PE add its row up, yet its "
                           f"tiles have {slots} part(s) a tile")
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


def done(lw: Lowering, rr: RowReduce) -> None:
    """After the GEMM: the norm's float output loses its storage when only the quantized
    copy is read (`xquant.drop_unwritten`); the norm itself is the plan's `fused`, so the
    tiling pass lowers it no further."""
    drop_unwritten(lw, rr.q)
