"""Which layers run as one tile, and on which PE: a decision across layers the plan pass
makes (the lowering plan's `lone`).

A layer whose tiling makes a single block (a mask, position ids, a small gather or
element-wise op) runs on the next PE of a rotation of its own per cube that persists
across layers. On a multi-cube NPU every layer's round-robin restarts at the cube's first
PE, so a chain of independent tiny layers would otherwise queue on one PE, each load
waiting for the PE's previous compute.

Only element-wise layers (ELEMENTWISE, ADD / MUL the row-wise lowering does not take,
EXPAND, CUMSUM) and gathers (EMBEDDING, GATHER, GATHER_ND, GATHER_ELEMENTS) place a layer of one
tile so. Whether one of them makes one block, and in which cube, is a function of the
graph and the memory plan (`ew_tiling`, `gather_tiling`, `row_spec` for the row-wise
lowering tried first): the very functions the per-op lowerings cut their blocks with, so
the plan and the tiles cannot disagree (the tiles read the plan's PE, `Lowering.lone_pe`,
and `checks.check_tiles` compares).
"""

from __future__ import annotations

from kernbench.compiler.lower.activation import dequant_bypassed, qdq_bypassed
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.ew_tiling import clamp_tiling, cumsum_tiling, ew_tiling
from kernbench.compiler.lower.gather_tiling import gather_tiling
from kernbench.compiler.lower.placement import is_view
from kernbench.compiler.lower.row_spec import row_spec
from kernbench.ir.model import LayerIR

#: the op types whose lowerings may run a layer as one tile on the rotation
ONE_TILE_OPS = ("ELEMENTWISE", "ADD", "MUL", "EXPAND", "CUMSUM", "EMBEDDING", "GATHER",
                "GATHER_ND", "GATHER_ELEMENTS")


def takes_no_op(lw: Lowering, n: LayerIR) -> bool:
    """Does layer `n` get no operation of its own: a view, a folded transpose, a
    DEQUANTIZE the GEMM reads through, a QDQ its integer GEMMs quantize for themselves, or
    a layer the plan has other layers' tiles compute? The tiling pass skips these."""
    return is_view(lw.plan, n) or bool(lw.state.folded.get(n.id)) \
        or dequant_bypassed(lw, n) or qdq_bypassed(lw, n) \
        or lw.lowering_plan.computed_elsewhere(n.id)


def _ew_cube(lw: Lowering, n: LayerIR) -> int | None:
    t = ew_tiling(lw, n)
    if t is None or len(t.blocks) != 1:
        return None
    return lw.lone_cube(lw.cube_near(t.y, t.blocks[0][0]))


def one_tile_cube(lw: Lowering, n: LayerIR) -> int | None:
    """The cube of layer `n`'s one tile when its lowering (the tiling pass's dispatch by op
    type) makes a single block placed on the rotation; None otherwise (more blocks, none,
    or a lowering that places no layer so)."""
    if n.op_type not in ONE_TILE_OPS or takes_no_op(lw, n):
        return None
    if n.op_type in ("ADD", "MUL"):
        return None if row_spec(lw, n) is not None else _ew_cube(lw, n)
    if n.op_type == "ELEMENTWISE":
        return None if clamp_tiling(lw, n) is not None else _ew_cube(lw, n)
    if n.op_type == "EXPAND":
        return _ew_cube(lw, n)
    t = cumsum_tiling(lw, n) if n.op_type == "CUMSUM" else gather_tiling(lw, n)
    if t is None or len(t.spans) != 1:
        return None
    return lw.lone_cube(t.spans[0][2])


def planned_lone(lw: Lowering) -> dict[str, int]:
    """Every layer of one tile → its PE: per cube, the next of the cube's PEs in graph
    order (all PEs on one cube)."""
    out: dict[str, int] = {}
    taken: dict[int, int] = {}
    for n in lw.g.nodes:
        cube = one_tile_cube(lw, n)
        if cube is None:
            continue
        pes = lw.pes.cube_pes[cube]
        i = taken.get(cube, 0)
        taken[cube] = i + 1
        out[n.id] = pes[i % len(pes)]
    return out


__all__ = ["ONE_TILE_OPS", "one_tile_cube", "planned_lone", "takes_no_op"]
