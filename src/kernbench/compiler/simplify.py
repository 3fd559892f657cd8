"""Simplify pass: reshapes and expands that change nothing are removed from the IR.

An exporter often writes a RESHAPE (or IDENTITY) whose output has exactly its input's
shape and dtype, e.g. between the attention output and its head transpose. It costs
nothing at run time (it is a view), but it hides the pattern the layout pass folds, so the
transpose would run as a whole-layer copy. Consumers read the input instead; graph
outputs and quantized tensors are left alone.

An EXPAND goes the same way when its output has its input's shape (the attention mask's
Expand to (batch, 1, seq, total) once the dims are bound), and when every reader broadcasts
its operands anyway to the same output shape: an element-wise layer (a mask expanded for
the Where that reads it), or a MATMUL when only batch axes were expanded (a token's input
repeated for each of its experts): those readers read the unexpanded input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kernbench.compiler.state import CompileState
from kernbench.ir.model import Graph, LayerIR

#: op types whose output is the numpy broadcast of their inputs
BROADCASTING = ("ADD", "MUL", "ELEMENTWISE")


def _no_op(g: Graph, n: LayerIR) -> bool:
    if n.op_type not in ("RESHAPE", "IDENTITY", "EXPAND") or not n.inputs or not n.inputs[0]:
        return False
    src, out = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    return (out.id not in g.outputs and not src.const and list(src.shape) == list(out.shape)
            and src.dtype == out.dtype and src.quant == out.quant)


def _broadcast_by_readers(g: Graph, n: LayerIR) -> bool:
    """Is `n` an EXPAND whose every reader broadcasts to the same output without it?"""
    if n.op_type != "EXPAND" or not n.inputs or not n.inputs[0]:
        return False
    src, out = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    if out.id in g.outputs or not out.consumers or src.dtype != out.dtype \
            or src.quant is not None or out.quant is not None:
        return False
    for cid in out.consumers:
        c = g.node(cid)
        shapes = [tuple(src.shape if t == out.id else g.tensors[t].shape)
                  for t in c.inputs if t]
        if c.op_type == "MATMUL" and len(shapes) == 2 \
                and src.shape[-2:] == out.shape[-2:] and min(map(len, shapes)) >= 2:
            shapes = [s[:-2] for s in shapes]  # the batch axes broadcast, the rest multiply
            want = g.tensors[c.outputs[0]].shape[:-2]
        elif c.op_type in BROADCASTING:
            want = g.tensors[c.outputs[0]].shape
        else:
            return False
        try:
            b = np.broadcast_shapes(*shapes)
        except ValueError:
            return False
        if list(b) != list(want):
            return False
    return True


@dataclass(frozen=True)
class DropNoOpReshapes:
    """Remove RESHAPE / IDENTITY / EXPAND layers whose output is their input, unchanged,
    and EXPANDs whose readers broadcast anyway."""

    name: str = "simplify"
    changes_ir: ClassVar[bool] = True
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        g = state.graph
        alias: dict[str, str] = {}
        expands = 0
        keep = []
        for n in g.nodes:
            n.inputs = [alias.get(t, t) if t else t for t in n.inputs]
            if _no_op(g, n) or _broadcast_by_readers(g, n):
                alias[n.outputs[0]] = n.inputs[0]
                expands += n.op_type == "EXPAND"
                continue
            keep.append(n)
        if alias:
            g.nodes = keep
            for tid in alias:
                del g.tensors[tid]
            g.rebuild_links()
            if len(alias) > expands:
                state.notes.append(f"simplify: {len(alias) - expands} reshapes that change "
                                   "nothing removed")
            if expands:
                state.notes.append(f"simplify: {expands} expands removed (no change, or "
                                   "their readers broadcast)")
        return state
