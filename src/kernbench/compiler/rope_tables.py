"""Whether a RoPE table's two halves are equal along its last axis, so that VE_ROPE_TILE,
which takes D/2 angles a row and uses them for both halves, computes what the IR's
full-width ROPE computes.

A constant table is checked by its values. A table computed at run time (Llama's rotary
embedding from the position ids: positions · inv_freq, Concat(freqs, freqs), Cos / Sin,
times the attention scaling) is proven equal by its producers, walking up from the table:

- a CONCAT along the last axis of one tensor with itself has equal halves;
- a layer that keeps the last axis and computes each row from the same row of its inputs
  keeps them: a RESHAPE / IDENTITY / EXPAND with the same last dimension, a TRANSPOSE
  that leaves the last axis last, ADD / MUL / ELEMENTWISE whose every input either has
  equal halves itself or is constant along the last axis (size 1 there, or a scalar).

Anything else (a graph input, another op, a walk deeper than `MAX_DEPTH`) is not proven.
"""

from __future__ import annotations

import numpy as np

from kernbench.ir.model import Graph, LayerIR, is_shape_only
from kernbench.ir.ops import node_attrs

#: producers walked up from a table at most
MAX_DEPTH = 16
#: layers whose output row is a function of the same row of their inputs
ROW_LOCAL = ("ADD", "MUL", "ELEMENTWISE")


def halves_equal(g: Graph, tid: str) -> bool:
    """Are the two halves of table `tid` equal along its last axis (module doc)?"""
    t = g.tensors[tid]
    if t.const:
        if is_shape_only(g):
            return True  # no values: the timing is the same either way
        a = np.asarray(g.weights[tid])
        h = a.shape[-1] // 2
        return bool(np.array_equal(a[..., :h], a[..., h:]))
    producers = {o: n for n in g.nodes for o in n.outputs if o}
    return _proven(g, producers, tid, MAX_DEPTH)


def _flat_last(g: Graph, tid: str) -> bool:
    """Is `tid` constant along the last axis of what it broadcasts into?"""
    shape = g.tensors[tid].shape
    return not shape or shape[-1] == 1


def _proven(g: Graph, producers: dict[str, LayerIR], tid: str, depth: int) -> bool:
    t = g.tensors[tid]
    d = t.shape[-1] if t.shape else 0
    n = producers.get(tid)
    if depth <= 0 or n is None or d % 2 or d == 0:
        return False
    ins = [i for i in n.inputs if i]
    if n.op_type == "CONCAT":
        return len(ins) == 2 and ins[0] == ins[1] \
            and int(node_attrs(n).axis) % len(t.shape) == len(t.shape) - 1
    if n.op_type in ("RESHAPE", "IDENTITY", "EXPAND"):
        src = g.tensors[ins[0]]
        return bool(src.shape) and src.shape[-1] == d \
            and _proven(g, producers, ins[0], depth - 1)
    if n.op_type == "TRANSPOSE":
        perm = [int(p) for p in node_attrs(n).perm]
        return perm[-1] == len(perm) - 1 and _proven(g, producers, ins[0], depth - 1)
    if n.op_type in ROW_LOCAL:
        halves = [i for i in ins if not _flat_last(g, i)]
        return bool(halves) and all(
            g.tensors[i].shape[-1] == d and (g.tensors[i].const and halves_equal(g, i)
                                             or _proven(g, producers, i, depth - 1))
            for i in halves)
    return False


__all__ = ["MAX_DEPTH", "halves_equal"]
