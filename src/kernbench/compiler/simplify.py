"""Simplify pass: reshapes that change nothing are removed from the IR.

An exporter often writes a RESHAPE (or IDENTITY) whose output has exactly its input's
shape and dtype, e.g. between the attention output and its head transpose. It costs
nothing at run time (it is a view), but it hides the pattern the layout pass folds, so the
transpose would run as a whole-layer copy. Consumers read the input instead; graph
outputs and quantized tensors are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph, LayerIR


def _no_op(g: Graph, n: LayerIR) -> bool:
    if n.op_type not in ("RESHAPE", "IDENTITY") or not n.inputs or not n.inputs[0]:
        return False
    src, out = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    return (out.id not in g.outputs and not src.const and list(src.shape) == list(out.shape)
            and src.dtype == out.dtype and src.quant == out.quant)


@dataclass(frozen=True)
class DropNoOpReshapes:
    """Remove RESHAPE / IDENTITY layers whose output is their input, unchanged."""

    name: str = "simplify"
    changes_ir: ClassVar[bool] = True
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        g = state.graph
        alias: dict[str, str] = {}
        keep = []
        for n in g.nodes:
            n.inputs = [alias.get(t, t) if t else t for t in n.inputs]
            if _no_op(g, n):
                alias[n.outputs[0]] = n.inputs[0]
                continue
            keep.append(n)
        if alias:
            g.nodes = keep
            for tid in alias:
                del g.tensors[tid]
            g.rebuild_links()
            state.notes.append(f"simplify: {len(alias)} reshapes that change nothing removed")
        return state
