"""Where an attention operand's heads come from, found by dataflow.

An operand of the score or output MATMUL is some layout of a source tensor: Reshape /
Transpose / Expand / Tile / Squeeze in any order, the matmul's own batch broadcasting
(multi-query attention), and for K the swap of the last two axes. `head_source` walks
back from the operand through those layers (and scalar Mul / Div, which scale the
scores, and per-tensor 8-bit QDQs, which the integer ATTENTION replaces) and pushes an
index array of each candidate source through the chain. The
result, viewed as (B, H, T, D), must be the source read as one of two layouts:

- "view": the source is (B, Hkv, T, D) in memory order (reshaped if need be);
- "swap": the source is (B, T, Hkv, D) in memory order: one (0, 2, 1, 3) transpose,
  which the compiler's layout pass folds into the attention's strided DMAs;

with each of the Hkv heads repeated H / Hkv times (grouped- / multi-query attention).
`materialize` adds the (at most two) layers that make the (B, Hkv, T, D) tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.onnx_import.fuse.common import (
    Index,
    add_tensor,
    ew,
    new_layer,
    qdq8,
    scalar,
)
from kernbench.ir.onnx_import.handlers_basic import transpose_is_view
from kernbench.ir.ops import node_attrs

LAYOUT = ("RESHAPE", "TRANSPOSE", "EXPAND", "TILE", "SQUEEZE", "UNSQUEEZE", "IDENTITY")
#: a step of a layout chain: ("RESHAPE", shape) / ("TRANSPOSE", perm) / ("EXPAND", shape) /
#: ("TILE", repeats)
Step = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class Operand:
    """An attention operand traced to its source: the source tensor, its layout ("view"
    or "swap"), its (B, Hkv, T, D) shape, the scalar factor on the way, the layers
    walked through (source to operand) and how many walk steps back it lies."""

    src: str
    kind: str
    shape: tuple[int, int, int, int]
    scale: float
    layers: tuple[LayerIR, ...]
    depth: int


def step_of(g: Graph, n: LayerIR) -> Step | None:
    """The layout step a layer applies to its first input, or None if it is not one."""
    out = tuple(g.tensors[n.outputs[0]].shape)
    if n.op_type == "TRANSPOSE":
        return ("TRANSPOSE", tuple(node_attrs(n).perm))
    if n.op_type == "EXPAND":
        return ("EXPAND", out)
    if n.op_type == "TILE":
        reps = g.weights.get(n.inputs[1]) if len(n.inputs) > 1 else None
        return None if reps is None else ("TILE", tuple(int(r) for r in np.ravel(reps)))
    if n.op_type in LAYOUT:
        return ("RESHAPE", out)
    return None


def apply_steps(steps: list[Step], a: np.ndarray) -> np.ndarray | None:
    """The index array `a` pushed through `steps` (None when a step does not apply)."""
    try:
        for op, arg in steps:
            if op == "RESHAPE":
                a = a.reshape(arg)
            elif op == "TRANSPOSE":
                a = np.transpose(a, arg)
            elif op == "EXPAND":
                a = np.broadcast_to(a, np.broadcast_shapes(a.shape, arg))
            else:
                a = np.tile(a, arg)
    except ValueError:
        return None
    return a


def _walk(g: Graph, ix: Index, t: str, scalable: bool):
    """(tensor, steps source→t, layers source→t, scale) for t and each layout / scalar
    layer behind it, nearest first."""
    steps: list[Step] = []
    layers: list[LayerIR] = []
    scale = 1.0
    out = [(t, [], [], 1.0)]
    for _ in range(16):
        p = ix.prod(t)
        if p is None:
            break
        st = step_of(g, p)
        if st is not None:
            steps.insert(0, st)
            t = p.inputs[0]
        elif qdq8(g, p):  # the attention quantizes the operand itself
            t = p.inputs[0]
        elif scalable and ew(p) in ("mul", "div"):
            s = scalar(g, p.inputs[1])
            nxt = p.inputs[0]
            if s is None and ew(p) == "mul":
                s, nxt = scalar(g, p.inputs[0]), p.inputs[1]
            if s is None or s == 0.0:
                break
            scale *= s if ew(p) == "mul" else 1.0 / s
            t = nxt
        else:
            break
        layers.insert(0, p)
        out.append((t, list(steps), list(layers), scale))
    return out


def _heads(canon: np.ndarray, bsz: int, fixed: int | None) -> int | None:
    """Hkv: the fewest source heads whose repetition gives the H heads of `canon`."""
    h = canon.shape[1]
    for hkv in range(1, h + 1):
        if h % hkv or (fixed is not None and hkv != fixed):
            continue
        r = h // hkv
        if r > 1 and not np.array_equal(canon[:, 0], canon[:, r - 1]):
            continue  # the first group's heads differ: not a repetition (cheap test first)
        base = canon[:, ::r]
        if np.array_equal(np.repeat(base, r, axis=1), canon):
            return hkv
    return None


def _classify(size: int, got: np.ndarray, bsz: int, fixed: int | None):
    """(kind, (B, Hkv, T, D)) of a source of `size` elements whose index array, viewed
    (B, H, T, D), is `got`; None if it is neither layout."""
    hkv = _heads(got, bsz, fixed)
    if hkv is None:
        return None
    base = got[:, ::got.shape[1] // hkv]
    b, _, t, d = base.shape
    if size != b * hkv * t * d:
        return None
    ref = np.arange(base.size).reshape(b, hkv, t, d)
    if np.array_equal(base, ref):
        return "view", (b, hkv, t, d)
    if np.array_equal(base, ref.reshape(b, t, hkv, d).transpose(0, 2, 1, 3)):
        return "swap", (b, hkv, t, d)
    return None


@lru_cache(maxsize=256)
def _layout_of(shape: tuple[int, ...], steps: tuple[Step, ...], batch: tuple[int, ...],
               bsz: int, heads: int, transposed: bool, fixed_kv: int | None):
    """`_classify` of a source of `shape` seen through `steps`, or None: a function of
    its arguments alone, kept for the next layer (a model's layers trace their
    operands through the same steps)."""
    size = math.prod(shape)
    if not shape or size > 1 << 26:
        return None
    got = apply_steps(list(steps), np.arange(size).reshape(shape))
    if got is None or got.ndim < 2:
        return None
    try:
        got = np.broadcast_to(got, batch + got.shape[-2:])
    except ValueError:
        return None
    if transposed:
        got = np.swapaxes(got, -1, -2)
    got = got.reshape((bsz, heads) + got.shape[-2:])
    return _classify(size, got, bsz, fixed_kv)


def head_source(g: Graph, ix: Index, t: str, *, batch: tuple[int, ...], bsz: int,
                heads: int, transposed: bool, pre: list[Step], scalable: bool = True,
                fixed_kv: int | None = None) -> Operand | None:
    """The source of matmul operand `t` as (B, Hkv, T, D) (see the module doc).

    `batch`: the matmul's broadcast batch dims (their product is bsz · heads); `pre`:
    virtual steps applied after t (an Einsum's operand permutation); `transposed`: t is
    Kᵀ (…, D, T); `fixed_kv`: Hkv must be this (V must match K)."""
    best: list[Operand] = []
    for depth, (src, steps, layers, scale) in enumerate(_walk(g, ix, t, scalable)):
        c = _layout_of(tuple(g.tensors[src].shape), tuple(steps + pre), tuple(batch), bsz,
                       heads, transposed, fixed_kv)
        if c is not None:
            best.append(Operand(src, c[0], c[1], scale, tuple(layers), depth))
    if not best:
        return None
    far = best[-1]
    views = [o for o in best if o.kind == "view" and o.scale == far.scale]
    exact = [o for o in views if tuple(g.tensors[o.src].shape) == o.shape]
    if views:  # an existing (B, H, T, D) tensor: the layout pass folds its transposes
        return exact[-1] if exact else views[-1]
    exact = [o for o in best if o.scale == far.scale
             and list(g.tensors[o.src].shape) == [o.shape[0], o.shape[2], o.shape[1], o.shape[3]]]
    return exact[0] if exact else far


def materialize(g: Graph, op: Operand, like: LayerIR) -> tuple[str, list[LayerIR]]:
    """The (B, Hkv, T, D) tensor of an operand and the layers that make it from its source
    (none, a RESHAPE view, and / or a (0, 2, 1, 3) TRANSPOSE)."""
    b, h, t, d = op.shape
    src_t = g.tensors[op.src]
    want = [b, h, t, d] if op.kind == "view" else [b, t, h, d]
    new: list[LayerIR] = []
    cur = op.src
    if list(src_t.shape) != want:
        r = add_tensor(g, f"{op.src}.heads", want, src_t.dtype)
        new.append(new_layer("RESHAPE", [cur], [r], {"shape": want, "view": True}, like, []))
        cur = r
    if op.kind == "swap":
        tt = add_tensor(g, f"{op.src}.bhsd", [b, h, t, d], src_t.dtype)
        new.append(new_layer("TRANSPOSE", [cur], [tt], {
            "perm": [0, 2, 1, 3], "view": transpose_is_view(want, [0, 2, 1, 3])}, like, []))
        cur = tt
    return cur, new
