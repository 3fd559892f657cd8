"""Layout pass: head transposes around attention become strided views.

`layout` folds data-moving transposes that only reorder (B, S, H, D) ↔ (B, H, S, D)
around tiled ATTENTION / KV_UPDATE: the attention tiles read and write the heads with
2-D DMAs instead of a separate copy layer. It records its decision per transpose node in
`CompileState.folded` ("read": consumers read the source with permuted strides; "write":
the attention writes straight into the transpose's output) and leaves the IR unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.state import CompileState, FoldKind
from kernbench.ir.model import Graph, LayerIR


def is_head_swap(n: LayerIR) -> bool:
    """A TRANSPOSE with perm (0, 2, 1, 3): (B, S, H, D) ↔ (B, H, S, D)."""
    return n.op_type == "TRANSPOSE" and list(n.attributes.get("perm", [])) == [0, 2, 1, 3]


def tiled_attention(g: Graph, n: LayerIR) -> bool:
    """ATTENTION layers the compiler tiles (integer Q·K and P·V with 8-bit activations and
    16-, 8- or 4-bit integer K / V, or all fp32; an additive fp32 mask or a constant boolean one, an
    optional soft-cap, except together with KV blocking); the others run whole as a layer
    op."""
    qa, kv = n.qbits_activation, n.qbits_kv
    fp32 = qa is None and kv is None  # lower/attention_float.py
    softcap = n.attributes.get("softcap", 0.0) or 0.0
    if not (n.op_type == "ATTENTION" and (qa == 8 and kv in (4, 8, 16) or fp32) and softcap >= 0
            and not (softcap and n.attributes.get("kv_block"))):
        return False
    if any(g.tensors[t].dtype != "fp32" for t in n.inputs[:3]):
        return False
    if fp32 and not n.attributes.get("scale", 0.0) > 0:
        return False
    if len(n.inputs) > 3 and n.inputs[3]:
        m = g.tensors[n.inputs[3]]
        if len(m.shape) != 4 or not (m.dtype == "fp32" or m.dtype == "bool" and m.const):
            return False
        if fp32 and (m.shape[2] != g.tensors[n.inputs[0]].shape[2]
                     or m.shape[3] < g.tensors[n.inputs[1]].shape[2]):
            return False  # the float tiles read whole (S, T) mask rows
    return True


def fold_kind(g: Graph, n: LayerIR) -> FoldKind | None:
    """How a head transpose folds into its neighbours' DMAs, or None if it stays a layer."""
    if not is_head_swap(n) or n.attributes.get("view"):
        return None
    out = g.tensors[n.outputs[0]]
    src = g.tensors[n.inputs[0]]
    consumers = [g.node(c) for c in out.consumers]
    if consumers and out.id not in g.outputs and all(
        tiled_attention(g, c) and out.id in c.inputs[:3]
        or c.op_type == "KV_UPDATE" and c.inputs[1] == out.id
        and c.attributes.get("axis", 2) == 2
        for c in consumers
    ):
        return "read"      # consumers read the source with strides
    if (src.producer and tiled_attention(g, g.node(src.producer))
            and src.consumers == [n.id] and src.id not in g.outputs):
        return "write"     # attention writes straight into the output
    return None


@dataclass(frozen=True)
class FoldTransposes:
    """Mark (0, 2, 1, 3) transposes next to ATTENTION / KV_UPDATE as strided views."""

    name: str = "layout"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        folded: dict[str, FoldKind] = {}
        for n in state.graph.nodes:
            kind = fold_kind(state.graph, n)
            if kind is not None:
                folded[n.id] = kind
        state.folded = folded
        if folded:
            state.notes.append(f"layout: {len(folded)} head transposes folded into DMAs")
        return state
