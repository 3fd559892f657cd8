"""Layout and memory passes: where every tensor lives in HBM, and in what format.

`layout` folds data-moving transposes that only reorder (B, S, H, D) ↔ (B, H, S, D)
around ATTENTION / KV_UPDATE into strided views: the attention tiles read and write the
heads with 2-D DMAs instead of a separate copy layer. `memory` then places every tensor:

- a *placement* is (storage key, address, shape, element strides, dtype); views share
  their source's storage (reshape of contiguous data, folded transposes);
- activations are allocated once, in cube 0's HBM, 256-byte aligned;
- graph inputs and constants are replicated in every cube's HBM (the host deploys each
  copy) so that PEs read them locally; DMAs use the copy in their own cube;
- TE weights are stored at their own bitwidth: int8 / int4 (packed two per byte) with the
  per-channel scales folded into a dequantisation vector, fp16 in fp16 mode, else fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernbench.compiler.state import CompileState
from kernbench.errors import InputError
from kernbench.numerics.dtypes import bits as dtype_bits

ALIGN = 256
#: bytes per element of the dtypes the compiler places (numerics.dtypes; int4 packed)
ITEMSIZE = {n: dtype_bits(n) // 8 if dtype_bits(n) % 8 == 0 else dtype_bits(n) / 8 for n in (
    "fp32", "fp16", "bf16", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool", "int4",
    "uint16", "uint32")}

def nbytes_of(shape: tuple[int, ...] | list[int], dtype: str) -> int:
    n = int(np.prod(shape)) if len(shape) else 1
    return int(np.ceil(n * ITEMSIZE[dtype]))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


@dataclass(frozen=True)
class Placement:
    key: str                      # storage key (dependency tracking, memory.json)
    addr: int                     # address of element 0 (cube 0 copy)
    shape: tuple[int, ...]
    strides: tuple[int, ...]      # element strides
    dtype: str
    replicas: tuple[int, ...] = ()  # per-cube addresses of element 0 (constants, inputs)

    @property
    def contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    def addr_in(self, cube: int) -> int:
        return self.replicas[cube] if self.replicas else self.addr

    def offset_of(self, cube: int, base_offset_elems: int) -> int:
        return self.addr_in(cube) + int(base_offset_elems * ITEMSIZE[self.dtype])


@dataclass
class Allocation:
    key: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    addrs: tuple[int, ...]        # one per copy (cube order); one entry if not replicated
    source: str | None = None     # IR tensor id it holds (or derives from)
    data: np.ndarray | None = field(default=None, repr=False)  # host data (constants)


class MemoryPlan:
    def __init__(self, n_cubes: int, cube_bytes: int) -> None:
        self.n_cubes = n_cubes
        self.cube_bytes = cube_bytes
        self._next = [c * cube_bytes for c in range(n_cubes)]
        self.allocations: dict[str, Allocation] = {}
        self.placements: dict[str, Placement] = {}
        self.scales: dict[str, float] = {}  # storage key → scale of a quantized activation

    def _bump(self, cube: int, nbytes: int) -> int:
        a = self._next[cube]
        self._next[cube] = a + -(-max(nbytes, 1) // ALIGN) * ALIGN
        if self._next[cube] > (cube + 1) * self.cube_bytes:
            raise InputError(f"model does not fit in cube {cube}'s HBM ({self.cube_bytes} B)")
        return a

    def allocate(self, key: str, shape, dtype: str, role: str, *, replicate: bool = False,
                 source: str | None = None, data: np.ndarray | None = None) -> Allocation:
        if key in self.allocations:
            return self.allocations[key]
        nb = nbytes_of(shape, dtype)
        cubes = range(self.n_cubes) if replicate else (0,)
        addrs = tuple(self._bump(c, nb) for c in cubes)
        a = Allocation(key, role, dtype, tuple(shape), nb, addrs, source, data)
        self.allocations[key] = a
        return a

    def place(self, tid: str, alloc: Allocation, shape=None, strides=None) -> Placement:
        shape = tuple(alloc.shape if shape is None else shape)
        p = Placement(alloc.key, alloc.addrs[0], shape,
                      tuple(strides) if strides is not None else contiguous_strides(shape),
                      alloc.dtype, alloc.addrs if len(alloc.addrs) > 1 else ())
        self.placements[tid] = p
        return p

    def constant(self, key: str, array: np.ndarray, dtype: str, role: str = "weight",
                 source: str | None = None, shape: tuple[int, ...] | None = None) -> Placement:
        """A replicated constant (weights, scale vectors, biases). `shape` is the logical
        shape when `array` is a packed encoding of it (int4: two values per byte)."""
        shape = tuple(array.shape if shape is None else shape)
        a = self.allocate(key, shape, dtype, role, replicate=True, source=source, data=array)
        if a.data is not None and a.dtype == "int4" and np.asarray(a.data).nbytes != a.nbytes:
            raise ValueError(f"{key}: {np.asarray(a.data).nbytes} packed bytes for a "
                             f"{a.nbytes}-byte int4 allocation")
        return Placement(key, a.addrs[0], shape, contiguous_strides(shape), dtype,
                         a.addrs if len(a.addrs) > 1 else ())

    def verify(self) -> None:
        spans = []
        for a in self.allocations.values():
            for addr in a.addrs:
                spans.append((addr, addr + a.nbytes, a.key))
        spans.sort()
        for (_s0, e0, k0), (s1, _e1, k1) in zip(spans, spans[1:], strict=False):
            if s1 < e0:
                raise InputError(f"memory plan: '{k0}' and '{k1}' overlap in HBM")

    def to_json(self) -> dict[str, Any]:
        out = {}
        for key in sorted(self.allocations):
            a = self.allocations[key]
            out[key] = {"role": a.role, "dtype": a.dtype, "shape": list(a.shape),
                        "nbytes": a.nbytes, "address": a.addrs[0],
                        "replicas": list(a.addrs) if len(a.addrs) > 1 else [],
                        "tensor": a.source}
        return {"version": "1.0", "tensors": out,
                "views": {tid: dict({"storage": p.key, "address": p.addr, "shape": list(p.shape),
                                     "strides": list(p.strides), "dtype": p.dtype},
                                    **({"scale": self.scales[p.key]} if p.key in self.scales
                                       else {}))
                          for tid, p in sorted(self.placements.items())}}


# ----------------------------------------------------------------------------- layout


def _is_head_swap(n) -> bool:  # noqa: ANN001
    return n.op_type == "TRANSPOSE" and list(n.attributes.get("perm", [])) == [0, 2, 1, 3]


def tiled_attention(g, n) -> bool:  # noqa: ANN001
    """ATTENTION layers the compiler tiles (integer Q·K and P·V, an additive fp32 mask or a
    constant boolean one); the others run whole as a layer op."""
    qa, kv = n.qbits_activation, n.qbits_kv
    if not (n.op_type == "ATTENTION" and qa == 8 and kv == 8
            and not n.attributes.get("softcap", 0.0)):
        return False
    if any(g.tensors[t].dtype != "fp32" for t in n.inputs[:3]):
        return False
    if len(n.inputs) > 3 and n.inputs[3]:
        m = g.tensors[n.inputs[3]]
        if len(m.shape) != 4 or not (m.dtype == "fp32" or m.dtype == "bool" and m.const):
            return False
    return True


@dataclass(frozen=True)
class FoldTransposes:
    """Mark (0, 2, 1, 3) transposes next to ATTENTION / KV_UPDATE as strided views."""

    name: str = "layout"

    def apply(self, state: CompileState) -> CompileState:
        g = state.graph
        folded: dict[str, Any] = {}
        for n in g.nodes:
            if not _is_head_swap(n) or n.attributes.get("view"):
                continue
            out = g.tensors[n.outputs[0]]
            src = g.tensors[n.inputs[0]]
            consumers = [g.node(c) for c in out.consumers]
            if consumers and out.id not in g.outputs and all(
                tiled_attention(g, c) and out.id in c.inputs[:3]
                or c.op_type == "KV_UPDATE" and c.inputs[1] == out.id
                and c.attributes.get("axis", 2) == 2
                for c in consumers
            ):
                folded[n.id] = "read"      # consumers read the source with strides
            elif (src.producer and tiled_attention(g, g.node(src.producer))
                  and src.consumers == [n.id] and src.id not in g.outputs):
                folded[n.id] = "write"     # attention writes straight into the output
        state.folded = folded
        if folded:
            state.notes.append(f"layout: {len(folded)} head transposes folded into DMAs")
        return state


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class PlanMemory:
    name: str = "memory"

    def apply(self, state: CompileState) -> CompileState:
        g = state.graph
        topo = state.topology
        plan = MemoryPlan(len(topo.cubes), topo.cubes[0].hbm_bytes)
        role_of: dict[str, str] = {}
        for tid in g.inputs:
            role_of[tid] = "input"
        for tid in g.outputs:
            role_of[tid] = "output"
        for n in g.nodes:
            if n.op_type == "KV_UPDATE":
                role_of.setdefault(n.inputs[0], "kv")
                role_of.setdefault(n.outputs[0], "kv")
        for tid in g.inputs:
            t = g.tensors[tid]
            a = plan.allocate(tid, t.shape, t.dtype, role_of[tid], replicate=True, source=tid)
            plan.place(tid, a)
        # constants are placed lazily by the lowerings (they choose the representation)
        for n in g.nodes:
            fold = state.folded.get(n.id)
            view = (n.op_type in ("RESHAPE", "TRANSPOSE") and n.attributes.get("view")
                    or n.op_type == "IDENTITY")
            if view:  # same bytes, same order: the output aliases its contiguous source
                src = plan.placements.get(n.inputs[0])
                if src is not None and src.contiguous:
                    t = g.tensors[n.outputs[0]]
                    plan.placements[n.outputs[0]] = Placement(
                        src.key, src.addr, tuple(t.shape), contiguous_strides(tuple(t.shape)),
                        src.dtype, src.replicas)
                    continue
            if fold == "read":
                src = self._source(plan, g, n.inputs[0])
                perm = n.attributes["perm"]
                t = g.tensors[n.outputs[0]]
                plan.placements[n.outputs[0]] = Placement(
                    src.key, src.addr, tuple(t.shape), tuple(src.strides[p] for p in perm),
                    src.dtype, src.replicas)
                continue
            if fold == "write":
                continue  # placed together with the attention output below
            for tid in n.outputs:
                if not tid or tid in plan.placements:
                    continue
                t = g.tensors[tid]
                dtype = t.dtype
                if t.dtype == "fp32" and n.op_type == "KV_UPDATE" and n.qbits_kv == "fp16":
                    dtype = "fp16"  # an fp16 KV cache is stored in fp16
                if n.op_type == "KV_UPDATE" and t.quant is not None and t.dtype == "fp32" \
                        and t.quant.dtype == "int8":  # the cache is stored at KV bits
                    dtype = "int8"
                    plan.scales[tid] = float(np.asarray(g.weights[t.quant.scale]).reshape(()))
                a = plan.allocate(tid, t.shape, dtype, role_of.get(tid, "intermediate"),
                                  source=tid)
                plan.place(tid, a)
                # an attention output whose transpose is folded lives in that transpose's
                # (contiguous) output, seen through permuted strides
                for c in t.consumers:
                    if state.folded.get(c) == "write":
                        tn = g.node(c)
                        out = g.tensors[tn.outputs[0]]
                        a2 = plan.allocate(out.id, out.shape, out.dtype,
                                           role_of.get(out.id, "intermediate"), source=out.id)
                        del plan.allocations[tid]
                        p_out = plan.place(out.id, a2)
                        perm = tn.attributes["perm"]
                        inv = [perm.index(i) for i in range(len(perm))]
                        plan.placements[tid] = Placement(
                            a2.key, a2.addrs[0], tuple(t.shape),
                            tuple(p_out.strides[i] for i in inv), a2.dtype)
        for tid in g.outputs:
            if tid not in plan.placements:
                raise InputError(f"graph output '{tid}' has no placement")
        state.memory = plan
        return state

    @staticmethod
    def _source(plan: MemoryPlan, g, tid: str) -> Placement:  # noqa: ANN001
        p = plan.placements.get(tid)
        if p is None:
            t = g.tensors[tid]
            a = plan.allocate(tid, t.shape, t.dtype, "intermediate", source=tid)
            p = plan.place(tid, a)
        return p
