"""The plan pass: the decisions that span several IR ops, made once before tiling.

`make_plan` walks the graph and writes a frozen `LoweringPlan` (plan.py) into the compile
state: the TE weights as the tiles read them (quantized or cast once per weight, mode and
bits; they do not depend on where tensors live) and the decisions that read the memory
plan (`memory_decisions`: which transposes a QDQ reads through, which dynamic
quantizations and integer GEMMs the tiles compute, which consumer a GEMM's epilogue
applies, which projections store int8 Q / K / V or new KV rows, which ReLU / Clip a
conv's epilogue applies, which norm one PE runs after adding a one-row GEMM up, which
head transposes a QDQ writes through, which float tensors no tile writes and the views of
them, on which PE each layer of one tile runs, and, on one cube, the PE each layer's
first tile goes to). The tiling pass reads the plan and
makes none of these decisions itself. The plan also names the layers that run whole and
pins the spread storages they touch (`whole_plan`): the memory is then planned again and
the memory decisions made again, until no layer run whole touches spread storage
(`plan_with_pins`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from kernbench.compiler.lower.activation import te_mode
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.conv_plan import planned_clamp
from kernbench.compiler.lower.conv_tiles import planned_conv_weight
from kernbench.compiler.lower.dynq_plan import plan_dynamic
from kernbench.compiler.lower.epilogue import planned_epilogue
from kernbench.compiler.lower.gemm_outputs import tiled_outputs
from kernbench.compiler.lower.gemm_rowreduce import planned_norm
from kernbench.compiler.lower.kv_rows import planned_kv_rows
from kernbench.compiler.lower.lone_plan import planned_lone
from kernbench.compiler.lower.pe_draws import planned_first_pe
from kernbench.compiler.lower.plan import LoweringPlan, WeightKey
from kernbench.compiler.lower.qdq_layout import folded_input_transposes, written_through
from kernbench.compiler.lower.te_weights import planned_te_weight
from kernbench.compiler.lower.values import TeWeight
from kernbench.compiler.lower.whole_plan import planned_whole
from kernbench.compiler.lower.xquant import planned_kv_store, planned_quant_stores
from kernbench.compiler.memory_plan import PlanMemory
from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph


def te_weights(g: Graph) -> dict[WeightKey, TeWeight | None]:
    """Every TE weight a GEMM, QKV_PROJ or CONV layer's tiles may read, by (weight, mode,
    bits); a CONV's mode is "conv:<mode>" (its weight is OIHW, placed whole)."""
    out: dict[WeightKey, TeWeight | None] = {}
    for n in g.nodes:
        mode = te_mode(n)
        if mode is None:
            continue
        if n.op_type in ("GEMM", "QKV_PROJ"):
            ws = [n.inputs[1]] if n.op_type == "GEMM" else list(n.inputs[1:4])
            if not all(g.tensors[w].const for w in ws):
                continue
            for w in ws:
                if (w, mode, n.qbits_weight) not in out:
                    out[(w, mode, n.qbits_weight)] = planned_te_weight(g, n, w, mode)
        elif n.op_type == "CONV" and len(n.inputs) > 1 and g.tensors[n.inputs[1]].const:
            key = (n.inputs[1], f"conv:{mode}", n.qbits_weight)
            if key not in out:
                out[key] = planned_conv_weight(g, n, n.inputs[1], mode)
    return out


def memory_decisions(state: CompileState, plan: LoweringPlan) -> LoweringPlan:
    """`plan` with the decisions that read the memory plan made on `state.memory`. They
    read placements through a Lowering on a copy of the memory plan: reading a constant
    places it, and the tiling pass places constants in its own order (addresses follow
    that order), so the plan pass leaves the memory plan as it found it."""
    memory = state.require_memory()
    # the tensors no tile writes are decided again below; none is dropped yet
    plan = dataclasses.replace(plan, unwritten=frozenset())
    state.lowering_plan = plan
    state.memory = memory.copy()
    try:
        lw = Lowering(state)
    finally:
        state.memory = memory
    tiled, matmuls = plan_dynamic(lw)
    fused = {layer.id: m for m, im in matmuls.items() for layer in (im.cast, im.mul)}
    lw.lowering_plan = dataclasses.replace(plan, dynamic_quantize=tiled,
                                           integer_matmuls=MappingProxyType(matmuls))
    epilogue, kv_stores, kv_rows = {}, {}, {}
    for n in state.graph.nodes:
        step = planned_epilogue(lw, n)
        if step is not None:
            epilogue[n.id] = step
            fused[step.layer.id] = n.id
            continue
        mode, outs = tiled_outputs(lw, n)
        for out in outs:  # as `gemm.gemm` asks: an int8 copy first, else the KV rows
            ks = planned_kv_store(lw, out.tid) if mode == "int" else None
            kr = planned_kv_rows(lw, out.tid, out.m) if ks is None else None
            if ks is not None:
                kv_stores[out.tid] = ks
            if kr is not None:
                kv_rows[out.tid] = kr
    quant_stores = planned_quant_stores(lw, epilogue)
    lw.lowering_plan = dataclasses.replace(lw.lowering_plan,
                                           quant_stores=MappingProxyType(quant_stores),
                                           epilogue=MappingProxyType(epilogue))
    clamps = {n.id: c for n in state.graph.nodes if (c := planned_clamp(lw, n)) is not None}
    fused.update((c, conv) for conv, c in clamps.items())
    norms = {n.id: na for n in state.graph.nodes if (na := planned_norm(lw, n)) is not None}
    fused.update((na.norm, m) for m, na in norms.items() if na.reduced)
    chains = [st.chain for st in epilogue.values()] \
        + [s.unread for s in (*quant_stores.values(), *kv_stores.values(), *kv_rows.values())]
    fused.update(unwritten_views(state.graph, chains))
    lw.lowering_plan = dataclasses.replace(
        lw.lowering_plan, read_through=MappingProxyType(folded_input_transposes(lw)),
        quant_stores=MappingProxyType(quant_stores), epilogue=MappingProxyType(epilogue),
        kv_stores=MappingProxyType(kv_stores), kv_rows=MappingProxyType(kv_rows),
        clamps=MappingProxyType(clamps), norms=MappingProxyType(norms),
        fused=MappingProxyType(fused))
    lw.lowering_plan = dataclasses.replace(
        lw.lowering_plan, written_through=MappingProxyType(written_through(lw)),
        unwritten=frozenset(t for c in chains for t in c))
    lw.lowering_plan = dataclasses.replace(lw.lowering_plan,
                                           lone=MappingProxyType(planned_lone(lw)))
    whole, pins = planned_whole(lw)
    lw.lowering_plan = dataclasses.replace(lw.lowering_plan, whole=whole,
                                           pins=MappingProxyType(pins))
    return dataclasses.replace(lw.lowering_plan,
                               first_pe=MappingProxyType(planned_first_pe(lw)))


def unwritten_views(g: Graph, chains: Iterable[Sequence[str]]) -> dict[str, str]:
    """The view nodes of each chain of unwritten tensors (a tensor no tile writes, then
    the views of it on the way to its reader), each → the producer of the chain's first
    tensor, whose tiles stand in for them."""
    out: dict[str, str] = {}
    for chain in chains:
        into = g.tensors[chain[0]].producer if chain else None
        for t in chain[1:]:
            view = g.tensors[t].producer
            if into is not None and view is not None:
                out[view] = into
    return out


def make_plan(state: CompileState) -> LoweringPlan:
    """The lowering plan of `state` (needs the memory plan and the layout decisions)."""
    state.require_memory()
    empty = MappingProxyType({})
    weights = LoweringPlan(MappingProxyType(te_weights(state.graph)), empty, frozenset(),
                           empty, empty, empty, empty, empty, empty, empty, frozenset(), empty,
                           empty, empty)
    return memory_decisions(state, weights)


#: rounds of "plan, pin the spread storage the layers run whole touch, plan the memory
#: again"
MAX_PIN_ROUNDS = 4


def plan_with_pins(state: CompileState) -> LoweringPlan:
    """The lowering plan of `state` once no layer that runs whole touches spread storage.

    A whole-layer op reads and writes tensors at one address, so a storage spread over the
    cubes that one touches is pinned whole to one cube (`CompileState.pinned`): the memory
    is planned again with it pinned and the plan's memory decisions made again, until a
    round pins nothing (at most a few rounds: pinning only removes spread storage). The
    plan's `pins` name every storage pinned here and the layer that needed it."""
    earlier = state.lowering_plan  # a plan pass run before on this state pinned these
    pins = dict(earlier.pins) if earlier is not None else {}
    plan = make_plan(state)
    for _ in range(MAX_PIN_ROUNDS):
        if not plan.pins:
            return dataclasses.replace(plan, pins=MappingProxyType(pins))
        for key, layer in plan.pins.items():
            pins.setdefault(key, layer)
        state.pinned |= set(plan.pins)
        PlanMemory().apply(state)
        plan = memory_decisions(state, plan)
    raise RuntimeError("plan: pinning spread storage did not converge")


@dataclass(frozen=True)
class Plan:
    """Make the cross-op decisions of the tiling into `state.lowering_plan`; pins the
    spread storage the layers that run whole touch (`state.pinned`) and plans the memory
    again (`state.memory`) until none does."""

    name: str = "plan"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("memory", "plan")

    def apply(self, state: CompileState) -> CompileState:
        state.lowering_plan = plan_with_pins(state)
        return state


__all__ = ["MAX_PIN_ROUNDS", "Plan", "make_plan", "plan_with_pins", "te_weights",
           "unwritten_views"]
