"""Invariants the pass manager checks after the passes that produce them.

A pass declares what it changes: `changes_ir` (the IR verifier runs after it) and
`produces`, names from `CHECKS` below. Each check reads the state and raises when an
invariant does not hold; none changes anything.

| product  | produced by | invariant |
| -------- | ----------- | --------- |
| `ir`     | quantize    | `kernbench.ir.verify` accepts the graph |
| `memory` | memory, tiling | no two HBM allocations overlap; every graph input and output is placed |
| `plan`   | plan        | the lowering plan names existing nodes and tensors: TE weights are constants, a read-through transpose is a TRANSPOSE read by a later QDQ, a planned integer GEMM is a MATMUL_INTEGER reading a planned DYNAMIC_QUANTIZE, a conv's clamp is a ReLU / Clip of its output, a norm after a GEMM's epilogue is fused into it exactly when row-reduced (two K parts or more), a fused layer comes after the layer computing it, a layer of one tile is an element-wise layer or gather on the next PE of its cube's rotation |
| `tiles`  | tiling      | every op's buffers are on its PE and fit one TCM bank; a buffer is written before it is read; `layer_tiles` counts every op; a VE_FUSED_TILE chains one layer's steps and those of the layers the lowering plan fuses into it; no tensor the plan leaves unwritten kept its storage; exactly the layers the plan runs as one tile did, on its PE |
| `order`  | placement   | op indices are the program positions; lowering phases stay in order |
| `tcm`    | tcm_alloc   | every buffer has an offset, ends inside the AllocatableTCM, stays in one bank; buffers live at the same time on one PE never overlap |
| `deps`   | schedule    | dependencies point backwards; every read waits for the last writer of its buffer |
| `cmdq`   | emit        | one entry per tile op plus END; ids are the positions |

A broken invariant is a compiler bug (`InvariantError`), except TCM capacity, which is a
`CapacityError` as the allocator raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain
from operator import lt

from kernbench.compiler.lower.lone_plan import ONE_TILE_OPS
from kernbench.compiler.lower.plan import LoweringPlan
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp
from kernbench.errors import CapacityError
from kernbench.ir.ops import node_attrs
from kernbench.ir.verify import verify as verify_ir


class InvariantError(RuntimeError):
    """A pass produced a state that breaks an invariant of the compiler (a bug)."""


def check_ir(state: CompileState) -> None:
    verify_ir(state.graph)


def check_memory(state: CompileState) -> None:
    plan = state.require_memory()
    plan.verify()
    for tid in list(state.graph.inputs) + list(state.graph.outputs):
        if tid not in plan.placements:
            raise InvariantError(f"memory plan: graph tensor '{tid}' has no placement")


def check_plan(state: CompileState) -> None:
    plan = state.require_lowering_plan()
    g = state.graph
    for w, _mode, _bits in plan.te_weights:
        if w not in g.tensors or not g.tensors[w].const:
            raise InvariantError(f"lowering plan: TE weight '{w}' is not a constant")
    order = {n.id: i for i, n in enumerate(g.nodes)}
    for t, q in plan.read_through.items():
        if t not in order or q not in order or g.node(t).op_type != "TRANSPOSE" \
                or g.node(q).op_type != "QDQ" or order[t] >= order[q]:
            raise InvariantError(f"lowering plan: '{q}' reads through '{t}', which is not "
                                 f"a transpose before that QDQ")
    for m in plan.integer_matmuls:
        dq = g.tensors[g.node(m).inputs[0]].producer if m in order else None
        if g.node(m).op_type != "MATMUL_INTEGER" or dq not in plan.dynamic_quantize \
                or g.node(dq).op_type != "DYNAMIC_QUANTIZE":
            raise InvariantError(f"lowering plan: '{m}' is not a MATMUL_INTEGER on a planned "
                                 f"DYNAMIC_QUANTIZE")
    for t, qs in plan.quant_stores.items():
        if t not in g.tensors or g.tensors[t].producer is None \
                or qs.read_as not in g.tensors or not g.tensors[qs.read_as].consumers:
            raise InvariantError(f"lowering plan: '{t}' is stored quantized for its readers "
                                 f"as '{qs.read_as}', yet no layer produces or reads it")
    for t, q in plan.written_through.items():
        if t not in order or q not in order or g.node(t).op_type != "TRANSPOSE" \
                or g.node(q).op_type != "QDQ" or order[t] <= order[q] \
                or g.node(t).inputs[0] not in g.node(q).outputs:
            raise InvariantError(f"lowering plan: '{q}' writes through '{t}', which is not "
                                 f"a transpose of that QDQ's output")
    for t in plan.unwritten:
        if t not in g.tensors or t in g.outputs or g.tensors[t].producer is None:
            raise InvariantError(f"lowering plan: '{t}' is left unwritten, yet it is no "
                                 f"tensor a layer produces, or it is a graph output")
    for conv, c in plan.clamps.items():
        if conv not in order or c not in order or g.node(conv).op_type != "CONV" \
                or g.node(c).op_type != "ELEMENTWISE" \
                or node_attrs(g.node(c)).op not in ("relu", "clip") \
                or g.node(c).inputs[0] not in g.node(conv).outputs \
                or plan.fused.get(c) != conv:
            raise InvariantError(f"lowering plan: '{conv}' applies '{c}' in its epilogue, "
                                 f"which is not a ReLU / Clip of that conv's output fused "
                                 f"into it")
    for m, na in plan.norms.items():
        if m not in order or na.norm not in order or g.node(m).op_type != "GEMM" \
                or g.node(na.norm).op_type not in ("LAYER_NORM", "RMS_NORM") \
                or order[na.norm] <= order[m] or m not in plan.epilogue:
            raise InvariantError(f"lowering plan: '{na.norm}' follows the epilogue of "
                                 f"'{m}', which is not a norm after that GEMM's fused step")
        if na.reduced != (plan.fused.get(na.norm) == m) or na.reduced and na.parts < 2:
            raise InvariantError(f"lowering plan: '{na.norm}' is row-reduced by '{m}' "
                                 f"({na.parts} K parts) only if it is fused into it, "
                                 f"with two parts or more")
    for c, p in plan.fused.items():
        if c not in order or p not in order or order[p] >= order[c]:
            raise InvariantError(f"lowering plan: '{c}' is fused into '{p}', which does not "
                                 f"come before it")
    _check_lone(state, order)
    _check_pins(state)


def _check_pins(state: CompileState) -> None:
    """The storages pinned whole are the plan's pins, each touched by the layer run whole
    that needed it; no layer the plan runs whole touches spread storage."""
    plan, memory = state.require_lowering_plan(), state.require_memory()
    nodes = {n.id: n for n in state.graph.nodes}
    if set(plan.pins) != state.pinned:
        key = min(set(plan.pins) ^ state.pinned)
        raise InvariantError(f"lowering plan: storage '{key}' is pinned to one cube, yet "
                             "the plan's pins " + ("name" if key in plan.pins else
                                                    "do not name") + " it as pinned")
    for key, layer in plan.pins.items():
        if layer not in nodes or not any(
                (p := memory.placements.get(t)) is not None and p.key == key
                for t in (*nodes[layer].inputs, *nodes[layer].outputs) if t):
            raise InvariantError(f"lowering plan: storage '{key}' is pinned for '{layer}', "
                                 "which is no layer touching it")
    for layer in sorted(plan.whole):
        spread = [t for t in (*nodes[layer].inputs, *nodes[layer].outputs)
                  if t and (p := memory.placements.get(t)) is not None and p.parts]
        if spread:
            raise InvariantError(f"lowering plan: '{layer}' runs whole, yet it touches "
                                 f"'{spread[0]}', which is spread over the cubes")



def _check_lone(state: CompileState, order: Mapping[str, int]) -> None:
    """Each layer of one tile is an element-wise layer or a gather with an op of its own,
    and takes the next PE of its cube's rotation in graph order."""
    plan, g = state.require_lowering_plan(), state.graph
    cube_pes: dict[int, list[int]] = {}
    for i, pe in enumerate(state.topology.pes):
        cube_pes.setdefault(pe.cube.index, []).append(i)
    taken: dict[int, int] = {}
    for layer in sorted(plan.lone, key=lambda x: order.get(x, -1)):
        pe = plan.lone[layer]
        if layer not in order or g.node(layer).op_type not in ONE_TILE_OPS \
                or plan.computed_elsewhere(layer) or not 0 <= pe < len(state.topology.pes):
            raise InvariantError(f"lowering plan: '{layer}' runs as one tile on PE {pe}, yet "
                                 "it is no element-wise layer or gather with an op of its own "
                                 "on an existing PE")
        pes = cube_pes[state.topology.pes[pe].cube.index]
        i = taken.get(pes[0], 0)
        taken[pes[0]] = i + 1
        if pes[i % len(pes)] != pe:
            raise InvariantError(f"lowering plan: '{layer}' runs as one tile on PE {pe}, "
                                 f"not on PE {pes[i % len(pes)]}, the next of its cube's "
                                 "rotation")


def _bank_bytes(state: CompileState) -> int:
    tcm = state.topology.config.cube.pe_template.pe_tcm
    return tcm.capacity_kib * 1024 // tcm.banks


def check_tiles(state: CompileState) -> None:
    tg = state.require_tiles()
    n_pes, bank = len(state.topology.pes), _bank_bytes(state)
    written: set[int] = set()
    for i, op in enumerate(tg.ops):
        pe = op.pe
        if not 0 <= pe < n_pes:
            raise InvariantError(f"TileGraph: op {i} ({op.opcode}) on PE {pe} of {n_pes}")
        for role, b in chain(op.reads, op.writes):
            if b.pe != pe or b.nbytes > bank:
                raise InvariantError(f"TileGraph: op {i} ({op.opcode}) {role}={b.label} is on "
                                     f"PE {b.pe} with {b.nbytes} B (op on PE {pe}, bank "
                                     f"{bank} B)")
        if op.role_offset:
            _check_role_offsets(i, op)
        for role, b in op.reads:
            if b.id not in written:
                raise InvariantError(f"TileGraph: op {i} ({op.opcode}) reads {role}={b.label} "
                                     "before any op writes it")
        for _, b in op.writes:
            written.add(b.id)
    if sum(tg.layer_tiles.values()) != len(tg.ops):
        raise InvariantError("TileGraph: layer_tiles does not count every op")
    plan, memory = state.lowering_plan, state.memory
    if plan is not None:
        _check_chains(tg, plan.fused)
        if tg.whole != plan.whole:
            layer = min(tg.whole ^ plan.whole)
            raise InvariantError(f"TileGraph: layer {layer} "
                                 + ("runs whole, yet the lowering plan does not say so"
                                    if layer in tg.whole else
                                    "is tiled, yet the lowering plan runs it whole"))
        if tg.lone != plan.lone:
            layer = min(set(tg.lone) ^ set(plan.lone)
                        or {t for t in tg.lone if tg.lone[t] != plan.lone[t]})
            raise InvariantError(f"TileGraph: layer {layer} runs as one tile on PE "
                                 f"{tg.lone.get(layer)}, the lowering plan says "
                                 f"{plan.lone.get(layer)}")
        _check_first_pe(state, tg, plan)
    if plan is not None and memory is not None:
        kept = sorted(t for t in plan.unwritten if t in memory.placements)
        if kept:  # the tiles and the plan disagree: some producer's tiles wrote it
            raise InvariantError(f"TileGraph: the lowering plan leaves {kept[0]} unwritten, "
                                 "yet it kept its storage")


def _check_role_offsets(i: int, op: TileOp) -> None:
    for role, off in op.role_offset.items():
        if not any(r == role and 0 <= off < b.nbytes for r, b in op.reads):
            raise InvariantError(f"TileGraph: op {i} ({op.opcode}) reads {role} at "
                                 f"{off} B, outside its buffer")


def _check_first_pe(state: CompileState, tg: TileGraph, plan: LoweringPlan) -> None:
    """On one cube, the tiles start each layer where the plan says and the PEs they draw
    lead to the next layer's planned first PE (the plan's count of each layer's draws
    and the tiles agree)."""
    if not plan.first_pe:
        return
    n_pes = len(state.topology.pes)
    layers = [n.id for n in state.graph.nodes if n.id in tg.drawn]
    if set(layers) != set(plan.first_pe):
        layer = min(set(layers) ^ set(plan.first_pe))
        raise InvariantError(f"TileGraph: layer {layer} takes an op of its own in only one "
                             "of the tiles and the lowering plan's first PEs")
    for layer, after in zip(layers, layers[1:], strict=False):
        end = (plan.first_pe[layer] + tg.drawn[layer]) % n_pes
        if end != plan.first_pe[after]:
            raise InvariantError(f"TileGraph: layer {layer}'s tiles drew {tg.drawn[layer]} "
                                 f"PE(s) from PE {plan.first_pe[layer]}, so {after} starts on "
                                 f"PE {end}; the lowering plan says PE {plan.first_pe[after]}")


def _check_chains(tg: TileGraph, fused: Mapping[str, str]) -> None:
    """Every VE_FUSED_TILE chains the vector steps of one layer and of the layers the
    lowering plan has that layer's tiles compute (`fused`): which IR nodes form one chain
    is the plan's; the tiles only choose which of their ops merge."""
    for i, op in enumerate(tg.ops):
        host = op.fused_into or op.layer
        stray = [s.layer for s in op.steps or () if s.layer != host and fused.get(s.layer) != host]
        if stray:
            raise InvariantError(f"TileGraph: op {i} ({op.opcode} of {host}) chains a step of "
                                 f"{stray[0]}, which the lowering plan does not compute in "
                                 f"{host}'s tiles")


def check_order(state: CompileState) -> None:
    ops = state.require_tiles().ops
    for pos, op in enumerate(ops):
        if op.index != pos:
            raise InvariantError(f"placement: op at position {pos} has index {op.index}")
        if pos and op.stream < ops[pos - 1].stream:
            raise InvariantError(f"placement: op {pos} moved before an earlier phase")


def check_tcm(state: CompileState) -> None:
    tg = state.require_tiles()
    tcm = state.topology.config.cube.pe_template.pe_tcm
    bank_bytes = _bank_bytes(state)
    limit = tcm.capacity_kib * 1024 - tcm.reserved_kib * 1024
    for b in tg.bufs:
        if b.offset is None:
            raise CapacityError(f"TileGraph: buffer {b.label} has no TCM offset")
        if b.offset + b.nbytes > limit:
            raise CapacityError(f"TileGraph: buffer {b.label} ends past the TCM")
        if b.offset // bank_bytes != (b.offset + b.nbytes - 1) // bank_bytes:
            raise CapacityError(f"TileGraph: buffer {b.label} straddles two banks")
    _check_live_overlap(tg)


def _check_live_overlap(tg: TileGraph) -> None:
    """Buffers live at the same time on one PE never overlap."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(tg.ops):
        for _, b in op.reads:
            first.setdefault(b.id, i)
            last[b.id] = i
        for _, b in op.writes:
            first.setdefault(b.id, i)
            last[b.id] = i
    by_pe: dict[int, list[Buf]] = {}
    for b in tg.bufs:
        by_pe.setdefault(b.pe, []).append(b)
    for pe_bufs in by_pe.values():
        spans = sorted((first.get(b.id, 0), last.get(b.id, 0), b.id, b) for b in pe_bufs)
        active: list[tuple[int, Buf]] = []
        for s, e, _, b in spans:
            active = [(ae, ab) for ae, ab in active if ae >= s]
            for _, ab in active:
                if ab.offset < b.offset + b.nbytes and b.offset < ab.offset + ab.nbytes:
                    raise CapacityError(
                        f"TileGraph: live buffers {ab.label} and {b.label} overlap in TCM")
            active.append((e, b))


def check_deps(state: CompileState) -> None:
    last_writer: dict[int, int] = {}
    for op in state.require_tiles().ops:
        deps, index = op.deps, op.index
        # strictly increasing, so within [0, index) when its ends are
        if deps and (deps[0] < 0 or deps[-1] >= index
                     or len(deps) > 1 and not all(map(lt, deps, deps[1:]))):
            raise InvariantError(f"schedule: op {index} has dependencies {deps[:8]} "
                                 "that are not earlier ops in order")
        for role, b in op.reads:
            w = last_writer.get(b.id)
            if w is not None and w != index and w not in deps:
                raise InvariantError(f"schedule: op {index} reads {role}={b.label} "
                                     f"without waiting for its writer {w}")
        for _, b in op.writes:
            last_writer[b.id] = index


def check_cmdq(state: CompileState) -> None:
    if state.cmdq is None:
        raise InvariantError("emit: no CMDQ program")
    entries = state.cmdq.entries
    if len(entries) != len(state.require_tiles().ops) + 1 or entries[-1]["opcode"] != "END":
        raise InvariantError("emit: the program is not one entry per tile op plus END")
    for pos, e in enumerate(entries):
        if e["id"] != pos:
            raise InvariantError(f"emit: entry at position {pos} has id {e['id']}")


CHECKS: dict[str, Callable[[CompileState], None]] = {
    "ir": check_ir, "memory": check_memory, "plan": check_plan, "tiles": check_tiles, "order": check_order,
    "tcm": check_tcm, "deps": check_deps, "cmdq": check_cmdq,
}
