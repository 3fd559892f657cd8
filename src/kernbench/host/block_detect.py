"""Find the repeated blocks of a graph that does not mark them (an ONNX import).

A decoder is a prologue, L structurally identical layer groups and an epilogue. Here the
groups are found from the graph alone and proven before they are marked:

- the anchors are the ATTENTION nodes (one per block); consecutive anchors must be the
  same number P of nodes apart, so a block is P consecutive nodes;
- a block starts as far before its anchor as the blocks stay identical node by node
  (`node_signature`: op type, attributes, bitwidths, input and output shapes and dtypes,
  which inputs are constants — weight values may differ);
- the wiring must repeat too: each input of node j of block b is, in every block, either
  an output of node i of the same block (same i and output slot), the matching output of
  the previous block (block 0: one fixed tensor of the prologue), a constant, or one and
  the same outside tensor (a mask, position ids).

`mark_blocks(g)` returns a copy of `g` with `metadata["block"]` set on every node of the
blocks (what `host.block_replay` needs), or None with the reason when any check fails.
"""

from __future__ import annotations

import json
from typing import Any

from kernbench.ir.model import Graph, LayerIR


def node_signature(g: Graph, n: LayerIR) -> str:
    """What must agree between node j of two blocks (weights' values may differ)."""
    t = g.tensors
    return json.dumps([n.op_type, n.attributes, n.qbits_weight, n.qbits_activation,
                       n.qbits_kv,
                       [(t[i].shape, t[i].dtype, t[i].const) if i else None for i in n.inputs],
                       [(t[o].shape, t[o].dtype) for o in n.outputs]],
                      sort_keys=True, default=str)


def _period(g: Graph) -> tuple[list[int], int] | None:
    anchors = [i for i, n in enumerate(g.nodes) if n.op_type == "ATTENTION"]
    if len(anchors) < 2:
        return None
    gaps = {b - a for a, b in zip(anchors, anchors[1:], strict=False)}
    return (anchors, gaps.pop()) if len(gaps) == 1 else None


def _start(g: Graph, anchors: list[int], p: int, sigs: list[str]) -> int:
    """The earliest offset before the first anchor at which all blocks agree."""
    back = 0
    while back < p - 1 and anchors[0] - back - 1 >= 0:
        if len({sigs[a - back - 1] for a in anchors}) != 1:
            break
        back += 1
    return anchors[0] - back


def _wiring(g: Graph, start: int, p: int, blocks: int) -> str | None:
    """None when every block is wired like block 1 relative to its neighbours (block 0's
    inputs from before the blocks stand where later blocks read their predecessor)."""
    where: dict[str, tuple[int, int, int]] = {}  # tensor → (block, node in block, slot)
    for b in range(blocks):
        for j in range(p):
            for k, o in enumerate(g.nodes[start + b * p + j].outputs):
                where[o] = (b, j, k)

    def kinds(b: int) -> list[Any]:
        out: list[Any] = []
        for j in range(p):
            for tid in g.nodes[start + b * p + j].inputs:
                src = where.get(tid) if tid else None
                if not tid or g.tensors[tid].const:
                    out.append("const")
                elif src is not None and src[0] == b:
                    out.append(("own", src[1], src[2]))
                elif src is not None and src[0] == b - 1:
                    out.append(("prev", src[1], src[2]))
                elif src is None and b == 0:
                    out.append(("before", tid))
                else:
                    out.append(("outside", tid))
        return out

    ref = kinds(1)
    for b in range(2, blocks):
        if kinds(b) != ref:
            return f"block {b} is wired differently from block 1"
    for want, got in zip(ref, kinds(0), strict=True):
        ok = got == want or (isinstance(want, tuple) and want[0] == "prev"
                             and isinstance(got, tuple) and got[0] == "before")
        if not ok:
            return "block 0 is wired differently from block 1"
    return None


def mark_blocks(g: Graph) -> tuple[Graph | None, str]:
    """(copy of `g` with block marks, "identical blocks") or (None, why not)."""
    found = _period(g)
    if found is None:
        return None, "no evenly spaced ATTENTION layers to anchor blocks on"
    anchors, p = found
    sigs = [node_signature(g, n) for n in g.nodes]
    start = _start(g, anchors, p, sigs)
    blocks = len(anchors)
    if start + blocks * p > len(g.nodes):
        return None, "the last block runs past the end of the graph"
    for j in range(p):
        if len({sigs[start + b * p + j] for b in range(blocks)}) != 1:
            return None, f"node {j} of the blocks differs between blocks"
    why = _wiring(g, start, p, blocks)
    if why is not None:
        return None, why
    out = g.model_copy(deep=True)
    for b in range(blocks):
        for j in range(p):
            out.nodes[start + b * p + j].metadata["block"] = b
    out.rebuild_links()
    return out, "identical blocks (detected)"
