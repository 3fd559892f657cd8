"""Memory pass: where every tensor lives in HBM, and in what format.

- activations are allocated once, 256-byte aligned; on a multi-cube NPU an intermediate
  with enough rows is *spread*: its rows are split over the cubes (part c in cube c's
  HBM), so that each cube's PEs work on local rows (`kernbench.compiler.hbm`). Storage a
  whole-layer op reads or writes is *pinned* whole in cube 0 (the plan pass finds those
  and plans again: `CompileState.pinned`); a present KV cache (a KV_UPDATE's output) is
  spread the same way, so its heads live in several cubes; graph inputs and other outputs
  are never spread;
- with `CompileOptions.reuse_hbm` (default: shape-only models) an unspread intermediate
  takes the space of a storage whose tensors are dead (compiler.liveness, MemoryPlan.allocate
  `live=`), but for a pinned one, which keeps the storage its pin names;
- graph inputs and constants are replicated in every cube's HBM (the host deploys each
  copy) so that PEs read them locally; DMAs use the copy in their own cube. A model whose
  constants and inputs do not fit each cube beside the activations (compiler.weights_fit)
  has each one but the small ones placed once instead: an input spread by rows, a TE
  weight by use (lower.weight_home), any other constant in the emptiest cube;
- views (reshape of contiguous data, IDENTITY, transposes the layout pass folded) share
  their source's storage through strides; a layer output the layout pass stores
  transposed (`CompileState.stored_permuted`: a ROPE after a folded head transpose) is
  allocated in the permuted shape and placed through permuted strides;
- a KV cache is stored at KV bits (int8 with its calibrated scale, or fp16);
- constants are placed lazily by the tiling pass, which chooses their representation
  (TE weights at their own bitwidth, scale vectors, biases).
The data types (Placement, Allocation, MemoryPlan) are in `kernbench.compiler.hbm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kernbench.compiler.hbm import (
    SMALL_CONSTANT_BYTES,
    HbmFullError,
    MemoryPlan,
    Placement,
    nbytes_of,
)
from kernbench.compiler.liveness import live_ranges
from kernbench.compiler.state import CompileState
from kernbench.compiler.weights_fit import constant_bytes, model_constant_bytes, model_input_bytes
from kernbench.errors import InputError, warn
from kernbench.ir.model import Graph, LayerIR, is_shape_only
from kernbench.ir.ops import node_attrs


def tensor_roles(g: Graph) -> dict[str, str]:
    """Role of the tensors that are not plain intermediates: input, output, kv."""
    role_of: dict[str, str] = {}
    for tid in g.inputs:
        role_of[tid] = "input"
    for tid in g.outputs:
        role_of[tid] = "output"
    for n in g.nodes:
        if n.op_type == "KV_UPDATE":
            role_of.setdefault(n.inputs[0], "kv")
            role_of.setdefault(n.outputs[0], "kv")
    return role_of


def _source(plan: MemoryPlan, g: Graph, tid: str,
            live: dict[str, tuple[int, int]] | None = None) -> Placement:
    p = plan.placements.get(tid)
    if p is None:
        t = g.tensors[tid]
        a = plan.allocate(tid, t.shape, t.dtype, "intermediate", source=tid,
                          live=(live or {}).get(tid))
        p = plan.place(tid, a)
    return p


def _place_view(plan: MemoryPlan, g: Graph, n: LayerIR) -> bool:
    """Same bytes, same order: the output aliases its contiguous source."""
    src = plan.placements.get(n.inputs[0])
    if src is None or not src.contiguous:
        return False
    t = g.tensors[n.outputs[0]]
    plan.placements[n.outputs[0]] = src.view(tuple(t.shape))
    return True


def _place_folded_read(plan: MemoryPlan, g: Graph, n: LayerIR,
                       live: dict[str, tuple[int, int]]) -> None:
    """A folded transpose's output is its source seen through permuted strides."""
    src = _source(plan, g, n.inputs[0], live)
    perm = node_attrs(n).perm
    t = g.tensors[n.outputs[0]]
    plan.placements[n.outputs[0]] = src.view(tuple(t.shape),
                                             tuple(src.strides[p] for p in perm))


def _stored_dtype(plan: MemoryPlan, g: Graph, n: LayerIR, tid: str) -> str:
    """The dtype a layer output is stored in: a KV cache at KV bits, else its own."""
    t = g.tensors[tid]
    dtype = t.dtype
    if t.dtype == "fp32" and n.op_type == "KV_UPDATE" and n.qbits_kv == "fp16":
        dtype = "fp16"  # an fp16 KV cache is stored in fp16
    if n.op_type == "KV_UPDATE" and isinstance(n.qbits_kv, int) and t.quant is not None \
            and t.dtype == "fp32" and t.quant.dtype in ("int8", "int4", "int16"):
        # the cache is stored at KV bits (a null qbits_kv is an fp32 cache whose `quant` is
        # only the scale its attention reads it with)
        dtype = t.quant.dtype
        plan.scales[tid] = float(np.asarray(g.weights[t.quant.scale]).reshape(()))
    return dtype


def _place_folded_write(state: CompileState, plan: MemoryPlan, tid: str, tn: LayerIR,
                        role_of: dict[str, str]) -> None:
    """An attention output whose transpose is folded lives in that transpose's
    (contiguous) output, seen through permuted strides."""
    g = state.graph
    t = g.tensors[tid]
    out = g.tensors[tn.outputs[0]]
    role = role_of.get(out.id, "intermediate")
    a2 = plan.allocate(out.id, out.shape, out.dtype, role, source=out.id,
                       spread=_spreads(state, out.id, role))
    del plan.allocations[tid]
    p_out = plan.place(out.id, a2)
    perm = node_attrs(tn).perm
    inv = [perm.index(i) for i in range(len(perm))]
    plan.placements[tid] = p_out.view(tuple(t.shape), tuple(p_out.strides[i] for i in inv))


def _spreads(state: CompileState, key: str, role: str, n: LayerIR | None = None) -> bool:
    """Is a storage spread over the cubes (if it has the rows for it)? Intermediates, and
    the present cache a KV_UPDATE writes (its (batch, head) rows in the cube of their part:
    each cube's PEs write and read their heads locally); never one a whole-layer op reads
    or writes (`pinned`), nor an in-place (paged) cache, nor a buffer a collective reads
    or writes (graph metadata `collective_buffers`: compiler.parallel)."""
    if key in state.pinned or key in state.graph.metadata.get("collective_buffers", ()):
        return False
    if n is not None and n.op_type == "KV_UPDATE" and key == n.outputs[0]:
        return not node_attrs(n).in_place  # a graph output or a "kv" intermediate
    return role == "intermediate"


def _place_outputs(state: CompileState, plan: MemoryPlan, n: LayerIR,
                   role_of: dict[str, str], live: dict[str, tuple[int, int]]) -> None:
    g = state.graph
    for tid in n.outputs:
        if not tid or tid in plan.placements:
            continue
        t = g.tensors[tid]
        dtype = _stored_dtype(plan, g, n, tid)
        # only plain intermediates take part in reuse; one a folded transpose writes is
        # re-homed below (its allocation replaced), so it neither gives nor takes space;
        # one pinned keeps its own storage, which the plan's pins name (taking another's
        # space would rename it once pinned: it was spread, so it took none before)
        no_reuse = any(state.folded.get(c) == "write" for c in t.consumers) \
            or tid in state.pinned
        role = role_of.get(tid, "intermediate")
        perm = state.stored_permuted.get(tid)
        shape = [t.shape[p] for p in perm] if perm else t.shape
        # a transposed store's rows are its (B, S) positions of H·D (where spread cuts)
        rows = [*shape[:-2], shape[-2] * shape[-1]] if perm and len(shape) > 1 else shape
        a = plan.allocate(tid, rows, dtype, role, source=tid,
                          spread=_spreads(state, tid, role, n),
                          live=None if tid in role_of or no_reuse else live.get(tid))
        p = plan.place(tid, a, shape)
        if perm:  # stored transposed (layout pass): seen through permuted strides
            inv = [perm.index(i) for i in range(len(perm))]
            plan.placements[tid] = p.view(tuple(t.shape), tuple(p.strides[i] for i in inv))
        for c in t.consumers:
            if state.folded.get(c) == "write":
                _place_folded_write(state, plan, tid, g.node(c), role_of)


def _copy_bytes(state: CompileState, plan: MemoryPlan) -> tuple[int, int]:
    """(bytes one copy of the whole model's constants and inputs takes, bytes every cube
    has for them beside the activations of `plan`, whose inputs are copied)."""
    g = state.graph
    own_inputs = sum(plan.allocations[t].nbytes for t in g.inputs if t in plan.allocations)
    need = model_constant_bytes(g) + model_input_bytes(g)
    free = min(plan.free_bytes(c) for c in range(plan.n_cubes)) + own_inputs
    return need, free


def _replicate_constants(state: CompileState, plan: MemoryPlan) -> bool:
    """The option, or whether one copy of the model's constants and inputs fits in the
    HBM every cube has beside the activations (`plan`: its inputs copied)."""
    if state.options.replicate_constants is not None:
        return state.options.replicate_constants
    if plan.n_cubes == 1:
        return True
    need, free = _copy_bytes(state, plan)
    return need <= free


def _warn_once(state: CompileState) -> None:
    """The warning line of a layout placed once (one line a model: the programs a command
    compiles of it give the same)."""
    g = state.graph
    need = model_constant_bytes(g) + model_input_bytes(g)
    warn(f"the model's constants and inputs ({need / 2**30:.3g} GiB) do not fit in each "
         "cube's HBM beside the activations: each one above "
         f"{SMALL_CONSTANT_BYTES // 1024} KiB is placed once (a GEMM weight's columns in "
         "the cube whose PEs compute them, an input spread by rows over the cubes, any "
         "other constant in the emptiest cube), and PEs read what is not in their cube "
         "over the links", key="constants placed once")


@dataclass(frozen=True)
class PlanMemory:
    """Place every graph input and layer output in HBM (state.memory)."""

    name: str = "memory"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("memory",)

    def apply(self, state: CompileState) -> CompileState:
        g = state.graph
        role_of = tensor_roles(g)
        reuse = state.options.reuse_hbm
        if reuse is None:
            reuse = is_shape_only(g)
        # folded transposes alias their source like views do
        live = live_ranges(g, aliases=state.folded) if reuse else {}
        once = state.options.replicate_constants is False
        plan: MemoryPlan | None = None
        if not once:
            try:
                plan = self._plan(state, False, role_of, live)
                once = not _replicate_constants(state, plan)
            except HbmFullError:
                if state.options.replicate_constants or len(state.topology.cubes) == 1:
                    raise
                once = True  # copies of the inputs (a long KV cache) fill a cube
            if once:
                _warn_once(state)
        if once or plan is None:
            plan = self._plan(state, True, role_of, live)
            plan.replicate_constants = False
            # the lowering allocates after the constants (quantized activation copies,
            # scratch): each cube keeps as much free as the activations placed here take
            # in the fullest cube, or an equal share of what the program's constants
            # leave free when that is less
            used = max(plan.cube_bytes - plan.free_bytes(c) for c in range(plan.n_cubes))
            free = sum(plan.free_bytes(c) for c in range(plan.n_cubes))
            plan.reserve = max(0, min(used, (free - constant_bytes(g)) // plan.n_cubes))
        state.memory = plan
        return state

    def _plan(self, state: CompileState, once: bool, role_of: dict[str, str],
              live: dict[str, tuple[int, int]]) -> MemoryPlan:
        """The plan of the graph's inputs and layer outputs; `once`: an input above
        `SMALL_CONSTANT_BYTES` is placed once (spread by rows when it has them, else
        whole in cube 0) instead of copied into every cube."""
        g = state.graph
        plan = MemoryPlan(len(state.topology.cubes), state.topology.cubes[0].hbm_bytes)
        for tid in g.inputs:
            t = g.tensors[tid]
            big = once and nbytes_of(t.shape, t.dtype) > SMALL_CONSTANT_BYTES
            a = plan.allocate(tid, t.shape, t.dtype, role_of[tid], replicate=not big,
                              source=tid, spread=big)
            plan.place(tid, a)
        for n in g.nodes:
            fold = state.folded.get(n.id)
            view = (n.op_type in ("RESHAPE", "TRANSPOSE") and node_attrs(n).view
                    or n.op_type == "IDENTITY")
            if view and _place_view(plan, g, n):
                continue
            if fold == "read":
                _place_folded_read(plan, g, n, live)
                continue
            if fold == "write":
                continue  # placed together with the attention output
            _place_outputs(state, plan, n, role_of, live)
        for tid in g.outputs:
            if tid not in plan.placements:
                raise InputError(f"graph output '{tid}' has no placement")
        return plan
