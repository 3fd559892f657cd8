"""Chains of vector ops on one tile become one VE_FUSED_TILE.

A GEMM's epilogue (dequantize, a fused GELU or residual ADD, the quantize for the next
GEMM), an attention block's dequantize → softmax step → row scale → quantize, a key-range
combine and its quantize, a LayerNorm and its quantize: each op reads what an earlier one
wrote, on the same PE. As separate entries each pays a Control-FSM round trip and a TCM
fetch and store. `fuse_chains` runs on the ops one IR node lowered (`lower_node`, so the
whole-program and the streamed compile see the same program) and merges op A (a vector
op or an already merged chain) into a later op B when:

- both are vector-engine math opcodes whose class is a `chain_step`, on the same PE,
  vector engine and lowering phase, every step one row (the data pass and the timing of
  each stay the step's own);
- B reads as its ``in`` a buffer X that A writes, and reads X once;
- nothing between them touches a buffer A writes, nor writes a buffer A reads (A now runs
  at B's place in the program).

The merged op takes B's place, layer and `fused_into` (the layer whose output it
produces); its steps keep their own fields and operands (`TileOp.steps`). B's reads of
what A wrote are forwarded inside the command. Afterwards (`_keep`) a step's ``out``
that a later op still reads, or that outlives the node, is listed in the entry's
``keep`` and written to TCM; any other is never written.
"""

from __future__ import annotations

import dataclasses

from kernbench.cmdq.opcodes import MODEL_BY_OPCODE
from kernbench.cmdq.opcodes.base import OnVectorEngine
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp

FUSED = "VE_FUSED_TILE"
def _chainable(op: TileOp) -> bool:
    """A vector math op whose class is a `chain_step` writing an ``out`` (or an already
    fused chain)."""
    if op.opcode == FUSED:
        return True
    cls = MODEL_BY_OPCODE.get(op.opcode)
    step = _STEP_CLASS.get(cls)
    if step is None:
        step = _STEP_CLASS[cls] = (cls is not None and cls.chain_step
                                   and issubclass(cls, OnVectorEngine) and cls.timing == "math")
    return (step and not op.hbm_reads and not op.hbm_writes
            and any(r == "out" for r, _ in op.writes))


#: opcode model class → is it a vector math chain step (`_chainable`'s test of the class)
_STEP_CLASS: dict[type | None, bool] = {}


def _rows(op: TileOp) -> int:
    f = op.fields
    return int(f.get("rows") or (f.get("out_shape") or [1])[0])


def _steps(op: TileOp) -> list[TileOp]:
    return op.steps if op.steps else [op]


def _swap(ops: list[tuple[str, Buf]], x: Buf, y: Buf) -> list[tuple[str, Buf]]:
    return [(r, y if buf is x else buf) for r, buf in ops]


def _unique(ops: list[tuple[str, Buf]]) -> list[tuple[str, Buf]]:
    seen: set[int] = set()
    out = []
    for r, buf in ops:
        if buf.id not in seen:
            seen.add(buf.id)
            out.append((r, buf))
    return out


def _merge(a: TileOp, b: TileOp, x: Buf, dropped: list[Buf]) -> TileOp:
    """A then B as one op at B's place: reads A's inputs and B's but those A wrote
    (forwarded), writes what both write. When X only passes from A's last step to B
    (nothing else in the chain touches it, B frees it and writes elsewhere), X is never
    allocated: the two steps name B's output instead, a nominal location (nothing is
    written there), and X is added to `dropped` (the caller removes it from the graph)."""
    fields = {"ve_id": a.fields["ve_id"]} if "ve_id" in a.fields else {}
    made = {buf.id for _, buf in a.writes}
    reads = _unique(a.reads + [(r, buf) for r, buf in b.reads if buf.id not in made])
    writes = _unique(a.writes + b.writes)
    steps_a, steps_b = _steps(a), _steps(b)
    frees = a.frees + b.frees
    refs = [buf for t in steps_a + steps_b for _, buf in t.reads + t.writes if buf is x]
    y = b.writes[0][1] if b.writes[0][0] == "out" else None
    if (len(refs) == 2 and any(f is x for f in b.frees) and y is not None and y is not x
            and any(buf is x for r, buf in steps_a[-1].writes if r == "out")):
        steps_a[-1] = dataclasses.replace(steps_a[-1], writes=_swap(steps_a[-1].writes, x, y))
        steps_b[0] = dataclasses.replace(steps_b[0], reads=_swap(steps_b[0].reads, x, y))
        writes = [(r, buf) for r, buf in writes if buf is not x]
        frees = [f for f in frees if f is not x]
        dropped.append(x)
    return TileOp(FUSED, b.pe, b.layer, fields, reads, writes, [], [], frees,
                  b.stream, index=b.index, fused_into=b.fused_into,
                  steps=steps_a + steps_b)


def _keep(ops: list[TileOp]) -> None:
    """Set each fused op's ``keep``: its steps (but the last) whose ``out`` a later op of
    `ops` reads, or that no op of `ops` frees from this op on (it outlives the node), and
    that no later step of the chain overwrites."""
    later_reads: set[int] = set()
    freed: set[int] = set()
    for op in reversed(ops):
        freed.update(f.id for f in op.frees)
        if op.opcode == FUSED and op.steps:
            keep = []
            for k, step in enumerate(op.steps[:-1]):
                out = next(buf for r, buf in step.writes if r == "out")
                rewritten = any(buf is out for t in op.steps[k + 1:] for _, buf in t.writes)
                if not rewritten and (out.id in later_reads or out.id not in freed):
                    keep.append(k)
            if keep:
                op.fields["keep"] = keep
            else:
                op.fields.pop("keep", None)
        later_reads.update(buf.id for _, buf in op.reads)


def fuse_chains(tg: TileGraph, first: int) -> None:
    """Merge the vector-op chains among `tg.ops[first:]` (one IR node's ops)."""
    ops = tg.ops[first:]
    if len(ops) < 2:
        return
    alive = [True] * len(ops)
    pending: dict[int, int] = {}   # buffer id → position of the chainable op writing it
    touched: dict[int, int] = {}   # buffer id → last position that read or wrote it
    written: dict[int, int] = {}   # buffer id → last position that wrote it
    merged_any = False
    dropped: list[Buf] = []  # buffers the merges made nominal
    for j, op in enumerate(ops):
        i = None
        chain = _chainable(op)
        if chain:
            ins = [buf for r, buf in op.reads if r == "in"]
            if len(ins) == 1 and ins[0].id in pending:
                x = ins[0]
                i = pending[x.id]
                a = ops[i]
                if not (a.pe == op.pe and a.stream == op.stream
                        and a.fields.get("ve_id") == op.fields.get("ve_id")
                        and all(touched.get(buf.id) == i for _, buf in a.writes)
                        and sum(buf.id == x.id for _, buf in op.reads) == 1
                        and all(written.get(buf.id, -1) <= i for _, buf in a.reads)
                        and all(_rows(t) == 1 for t in _steps(a) + [op])):
                    i = None
        if i is not None:
            merged = _merge(ops[i], op, ins[0], dropped)
            alive[i] = False
            merged_any = True
            layer = ops[i].layer
            tg.layer_tiles[layer] -= 1
            if not tg.layer_tiles[layer]:
                del tg.layer_tiles[layer]
            ops[j] = op = merged
            chain = True
        for _, buf in op.reads + op.writes:
            touched[buf.id] = j
            pending.pop(buf.id, None)
        for _, buf in op.writes:
            written[buf.id] = j
        if chain:
            for _, buf in op.writes:
                pending[buf.id] = j
    kept = [op for op, keep in zip(ops, alive, strict=True) if keep]
    if merged_any:
        _keep(kept)
    tg.ops[first:] = kept
    _drop_bufs(tg, dropped)


def _drop_bufs(tg: TileGraph, dropped: list[Buf]) -> None:
    """Remove `dropped` from `tg.bufs` in one walk back from the end (they are this node's,
    so recent): one walk per node, not one per merge."""
    left = {id(b) for b in dropped}
    bufs = tg.bufs
    k = len(bufs)
    while left and k:
        k -= 1
        if id(bufs[k]) in left:
            left.discard(id(bufs[k]))
            del bufs[k]
