"""Which layers run whole, and which spread storages they need pinned: a decision the
plan pass makes (the lowering plan's `whole` and `pins`).

A layer runs whole (one VE_LAYER_OP / TE_LAYER_OP on one PE, `layer_op`) when it has an
operation of its own (`lone_plan.takes_no_op`) and its op type has no tiled lowering, or
its lowering does not tile it. Whether a lowering tiles a layer is a function of the
graph, the memory plan and the lowering plan's earlier decisions (`TILED`): the very
functions the per-op lowerings decide with, so the plan and the tiles cannot disagree
(`checks.check_tiles` compares the layers the tiles ran whole with the plan's).

A whole-layer op reads and writes whole tensors at one address, so a storage spread over
the cubes that it touches (`spread_storages`) must be pinned whole to one cube: the plan
pass pins those, plans the memory again, and plans again until no whole layer touches a
spread storage (pinning only removes spread storage, so this ends).
"""

from __future__ import annotations

from collections.abc import Callable

from kernbench.compiler.layout import COPY_OPS
from kernbench.compiler.lower.attention_tiling import attention_tiled
from kernbench.compiler.lower.bmm_tiling import bmm_tiling
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.conv_plan import conv_tiled
from kernbench.compiler.lower.copy_tiling import copy_pairs
from kernbench.compiler.lower.ew_tiling import clamp_tiling, cumsum_tiling, ew_tiling
from kernbench.compiler.lower.gather_tiling import gather_tiling
from kernbench.compiler.lower.gemm_outputs import gemm_tiled
from kernbench.compiler.lower.kv_rows import kv_update_tiled
from kernbench.compiler.lower.lone_plan import takes_no_op
from kernbench.compiler.lower.pool_tiling import pool_tiling, reduce_tiling
from kernbench.compiler.lower.qdq_layout import qdq_tiled
from kernbench.compiler.lower.qlinear_tiling import (
    qconv_tiling,
    qlinear_matmul_tiled,
    quant_tiling,
)
from kernbench.compiler.lower.rope_tiling import rope_tiling
from kernbench.compiler.lower.row_spec import ROW_OPS, row_spec
from kernbench.ir.model import LayerIR

Tiled = Callable[[Lowering, LayerIR], bool]


def _row_or_ew(lw: Lowering, n: LayerIR) -> bool:
    return row_spec(lw, n) is not None or ew_tiling(lw, n) is not None


def _clamp_or_ew(lw: Lowering, n: LayerIR) -> bool:
    return clamp_tiling(lw, n) is not None or ew_tiling(lw, n) is not None


def _some(tiling: Callable[[Lowering, LayerIR], object]) -> Tiled:
    return lambda lw, n: tiling(lw, n) is not None


#: op type → does its lowering tile a layer (the tiling pass's LOWERINGS, key for key)
TILED: dict[str, Tiled] = {
    "GEMM": gemm_tiled, "QKV_PROJ": gemm_tiled, "ATTENTION": attention_tiled,
    "KV_UPDATE": kv_update_tiled, "QDQ": qdq_tiled, **{op: _some(row_spec) for op in ROW_OPS},
    "MATMUL": _some(bmm_tiling),
    "DYNAMIC_QUANTIZE": lambda lw, n: n.id in lw.lowering_plan.dynamic_quantize,
    "MATMUL_INTEGER": lambda lw, n: n.id in lw.lowering_plan.integer_matmuls,
    "CONV": conv_tiled, "POOL": _some(pool_tiling), "REDUCE": _some(reduce_tiling),
    "ELEMENTWISE": _clamp_or_ew, "ADD": _row_or_ew, "MUL": _row_or_ew,
    "CUMSUM": _some(cumsum_tiling), "EXPAND": _some(ew_tiling),
    **{op: _some(gather_tiling) for op in ("EMBEDDING", "GATHER", "GATHER_ND",
                                            "GATHER_ELEMENTS")},
    "ROPE": _some(rope_tiling), **{op: _some(copy_pairs) for op in COPY_OPS},
    "QLINEAR_MATMUL": qlinear_matmul_tiled, "QLINEAR_CONV": _some(qconv_tiling),
    "QUANTIZE": _some(quant_tiling), "DEQUANTIZE": _some(quant_tiling),
}


def runs_whole(lw: Lowering, n: LayerIR) -> bool:
    """Does layer `n` run as one whole-layer op (module doc)?"""
    if takes_no_op(lw, n):
        return False
    tiled = TILED.get(n.op_type)
    return tiled is None or not tiled(lw, n)


def spread_storages(lw: Lowering, n: LayerIR) -> list[str]:
    """The storages spread over the cubes that layer `n` reads or writes, in operand
    order (a whole-layer op needs them pinned)."""
    out: list[str] = []
    for tid in list(n.inputs) + list(n.outputs):
        p = lw.plan.placements.get(tid) if tid else None
        if p is not None and p.parts and p.key not in out:
            out.append(p.key)
    return out


def planned_whole(lw: Lowering) -> tuple[frozenset[str], dict[str, str]]:
    """(the layers that run whole, each spread storage they touch → the first of them in
    graph order): what the plan pass records, and pins."""
    whole: set[str] = set()
    pins: dict[str, str] = {}
    for n in lw.g.nodes:
        if runs_whole(lw, n):
            whole.add(n.id)
            for key in spread_storages(lw, n):
                pins.setdefault(key, n.id)
    return frozenset(whole), pins


__all__ = ["TILED", "planned_whole", "runs_whole", "spread_storages"]
