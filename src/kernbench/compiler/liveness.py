"""Live ranges of activations over the layer order, for HBM reuse (MemoryPlan.allocate
with `live=`).

`live_ranges(g)` gives, per tensor a layer writes, (first, last): the position of its
producer and of its last consumer in `g.nodes`. Views share their source's storage, so a
view's readers extend its source's range (RESHAPE/TRANSPOSE with `view`, IDENTITY, and the
transposes the layout pass folded, given as `aliases`); graph inputs live from the start;
graph outputs and KV caches (KV_UPDATE's cache input and output) live to the end. A
storage may be reused once every tensor in it is past its `last`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernbench.ir.model import Graph
from kernbench.ir.ops import node_attrs


def _is_view(n) -> bool:  # noqa: ANN001 - an IR LayerIR
    return (n.op_type in ("RESHAPE", "TRANSPOSE") and bool(node_attrs(n).view)
            or n.op_type == "IDENTITY")


def live_ranges(g: Graph, aliases: Iterable[str] = ()) -> dict[str, tuple[int, int]]:
    """Tensor id → (first, last) layer positions; views map to their root's range too.
    `aliases`: ids of further nodes whose output aliases their first input (folded
    transposes)."""
    alias_nodes = set(aliases)
    root: dict[str, str] = {}
    end = len(g.nodes)
    rng: dict[str, list[int]] = {tid: [-1, -1] for tid in g.inputs}
    for i, n in enumerate(g.nodes):
        for tid in n.inputs:
            if not tid or g.tensors[tid].const:
                continue
            r = root.get(tid, tid)
            span = rng.setdefault(r, [i, i])
            span[1] = max(span[1], i)
        if _is_view(n) or n.id in alias_nodes:
            src = n.inputs[0]
            for o in n.outputs:
                if o:
                    root[o] = root.get(src, src)
            continue
        for o in n.outputs:
            if o:
                rng.setdefault(o, [i, i])
    keep = set(g.outputs)
    for n in g.nodes:
        if n.op_type == "KV_UPDATE":
            keep.update(t for t in (n.inputs[0], *n.outputs) if t)
    for tid in keep:
        r = root.get(tid, tid)
        if r in rng:
            rng[r][1] = end
    out = {tid: (a, b) for tid, (a, b) in rng.items()}
    for v, r in root.items():
        if r in out:
            out[v] = out[r]
    return out
