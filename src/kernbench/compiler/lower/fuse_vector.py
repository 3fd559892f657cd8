"""Chains of vector ops on one tile become one VE_FUSED_TILE (ADR-0724).

A GEMM's epilogue (dequantize, a fused GELU or residual ADD, the quantize for the next
GEMM), an attention block's dequantize → softmax → row scale → quantize, a LayerNorm and
its quantize: each op reads the tile the previous one wrote, on the same PE. As separate
entries each pays a Control-FSM round trip and a TCM fetch and store. `fuse_chains` runs
on the ops one IR node lowered (`lower_node`, so the whole-program and the streamed
compile see the same program) and merges op A into the next op B when:

- both are single-output vector-engine math opcodes on the same PE, vector engine and
  lowering phase (the data pass and the timing of each stay the step's own);
- B reads A's output buffer X as its ``in`` operand, and nothing else reads or writes X
  between them; after B, X is dead (B frees it) or holds B's result (B writes it);
- no op between them writes a buffer A reads (A now runs at B's place in the program).

The merged op takes B's place, layer and `fused_into` (the layer whose output it
produces); its steps keep their own fields and operands (`TileOp.steps`).
"""

from __future__ import annotations

import dataclasses

from kernbench.cmdq.opcodes import MODEL_BY_OPCODE
from kernbench.cmdq.opcodes.base import OnVectorEngine
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp

FUSED = "VE_FUSED_TILE"
#: the vector ops the compiler chains: the epilogue, normalization and quantization
#: family (windowed, reducing and run-time-qparams ops keep their entries: their chains
#: are not on a decode step's path, and each would need its own measurement)
STEPS = frozenset({"VE_DEQUANTIZE_TILE", "VE_GELU_TILE", "VE_SILU_TILE", "VE_ADD_TILE",
                   "VE_MUL_TILE", "VE_QUANTIZE_TILE", "VE_REQUANTIZE_TILE",
                   "VE_LAYERNORM_TILE", "VE_RMSNORM_TILE", "VE_ELEMENTWISE_TILE"})


def _chainable(op: TileOp) -> bool:
    """A single-output vector math op (or an already fused chain)."""
    if op.opcode == FUSED:
        return True
    if op.opcode not in STEPS:
        return False
    cls = MODEL_BY_OPCODE.get(op.opcode)
    return (cls is not None and issubclass(cls, OnVectorEngine) and cls.timing == "math"
            and len(op.writes) == 1 and op.writes[0][0] == "out"
            and not op.hbm_reads and not op.hbm_writes)


def _rows(op: TileOp) -> int:
    f = op.fields
    return int(f.get("rows") or (f.get("out_shape") or [1])[0])


def _steps(op: TileOp) -> list[TileOp]:
    return op.steps if op.steps else [op]


def _swap(ops: list[tuple[str, Buf]], x: Buf, y: Buf) -> list[tuple[str, Buf]]:
    return [(r, y if buf is x else buf) for r, buf in ops]


def _merge(tg: TileGraph, a: TileOp, b: TileOp, x: Buf) -> TileOp:
    """A then B as one op at B's place: reads A's inputs and B's but the chained one X.
    When the merged op no longer touches X (A did not compute in place), X is never
    allocated: the chained operands of the steps name B's output instead, a nominal
    location (nothing is written there, ADR-0724)."""
    fields = {"ve_id": a.fields["ve_id"]} if "ve_id" in a.fields else {}
    reads = a.reads + [(r, buf) for r, buf in b.reads if not (r == "in" and buf is x)]
    writes = list(b.writes)
    steps_a, steps_b = _steps(a), _steps(b)
    frees = a.frees + b.frees
    if not any(buf is x for _, buf in reads + writes):
        y = writes[0][1]
        steps_a[-1] = dataclasses.replace(steps_a[-1], writes=_swap(steps_a[-1].writes, x, y))
        steps_b[0] = dataclasses.replace(steps_b[0], reads=_swap(steps_b[0].reads, x, y))
        frees = [f for f in frees if f is not x]
        for k in range(len(tg.bufs) - 1, -1, -1):  # X is recent: search from the end
            if tg.bufs[k] is x:
                del tg.bufs[k]
                break
    return TileOp(FUSED, b.pe, b.layer, fields, reads, writes, [], [], frees,
                  b.stream, index=b.index, fused_into=b.fused_into,
                  steps=steps_a + steps_b)


def fuse_chains(tg: TileGraph, first: int) -> None:
    """Merge the vector-op chains among `tg.ops[first:]` (one IR node's ops)."""
    ops = tg.ops[first:]
    if len(ops) < 2:
        return
    alive = [True] * len(ops)
    pending: dict[int, int] = {}   # buffer id → position of the chainable op writing it
    touched: dict[int, int] = {}   # buffer id → last position that read or wrote it
    written: dict[int, int] = {}   # buffer id → last position that wrote it
    for j, op in enumerate(ops):
        i = None
        if _chainable(op):
            ins = [buf for r, buf in op.reads if r == "in"]
            if len(ins) == 1 and ins[0].id in pending:
                x = ins[0]
                i = pending[x.id]
                a = ops[i]
                if not (a.pe == op.pe and a.stream == op.stream
                        and a.fields.get("ve_id") == op.fields.get("ve_id")
                        and touched.get(x.id) == i
                        and sum(buf.id == x.id for _, buf in op.reads) == 1
                        and (any(f.id == x.id for f in op.frees)
                             or op.writes[0][1].id == x.id)
                        and all(written.get(buf.id, -1) <= i for _, buf in a.reads)
                        and all(_rows(t) == 1 for t in _steps(a) + [op])):
                    i = None
        if i is not None:
            merged = _merge(tg, ops[i], op, ins[0])
            alive[i] = False
            layer = ops[i].layer
            tg.layer_tiles[layer] -= 1
            if not tg.layer_tiles[layer]:
                del tg.layer_tiles[layer]
            ops[j] = op = merged
        for _, buf in op.reads:
            touched[buf.id] = j
            pending.pop(buf.id, None)
        for _, buf in op.writes:
            touched[buf.id] = j
            written[buf.id] = j
            pending.pop(buf.id, None)
        if _chainable(op):
            pending[op.writes[0][1].id] = j
    tg.ops[first:] = [op for op, keep in zip(ops, alive, strict=True) if keep]
