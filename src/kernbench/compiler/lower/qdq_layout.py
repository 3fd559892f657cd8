"""Which head transpose a QDQ folds into its DMAs (`qdq_layout`), and the QDQ's int8
parameters (`qdq_params`): read by the QDQ lowering (`qdq`) and by the plan pass, which
gives a transpose a QDQ reads through (`folded_input_transposes`) or writes its output
through (`written_through`) no operation of its own (the layouts themselves: `qdq`'s
module docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.activation import qdq_bypassed
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.quantize import qdq_source
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs

HEAD_SWAP = [0, 2, 1, 3]


KEY_T = [0, 2, 3, 1]


def qdq_params(lw: Lowering, n: LayerIR) -> tuple[float, int] | None:
    """(scale, zero point of the int8 computation) of a per-tensor 8-bit QDQ, or None."""
    if qdq_source(lw.g, n.outputs[0]) is None:
        return None
    scale = float(np.asarray(lw.g.weights[n.inputs[1]], np.float32).reshape(()))
    zp = (int(np.asarray(lw.g.weights[n.inputs[2]]).reshape(()))
          if len(n.inputs) > 2 and n.inputs[2] else 0)
    if node_attrs(n).dtype == "uint8":
        zp -= 128
    return scale, zp


@dataclass(frozen=True)
class QdqLayout:
    """A QDQ with a folded head transpose: the (B, S, H, D) tensor it reads or writes
    strided, the transpose, and whether it is on the input side (and its perm)."""

    transpose: LayerIR
    strided: Placement   # the transpose's source (input side) or output (output side)
    other: Placement     # the QDQ's own output (input side) or input (output side)
    input_side: bool
    key_t: bool          # input perm (0, 2, 3, 1): the tile transposes in TCM


def _four_d(p: Placement | None) -> bool:
    return p is not None and len(p.shape) == 4 and p.strides[3] == 1 and p.dtype == "fp32"


def _input_transpose(lw: Lowering, n: LayerIR) -> QdqLayout | None:
    g = lw.g
    src = g.tensors[n.inputs[0]]
    if src.producer is None or src.id in g.outputs or len(src.consumers) != 1:
        return None
    t = g.node(src.producer)
    if t.op_type != "TRANSPOSE":
        return None
    perm = list(node_attrs(t).perm)
    if perm not in (HEAD_SWAP, KEY_T) or node_attrs(t).view \
            or lw.state.folded.get(t.id) or g.tensors[t.inputs[0]].const:
        return None
    x = lw.placement(t.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    if not _four_d(x) or not _four_d(y) or not y.contiguous:
        return None
    return QdqLayout(t, x, y, True, perm == KEY_T)


def _output_transpose(lw: Lowering, n: LayerIR) -> QdqLayout | None:
    g = lw.g
    out = g.tensors[n.outputs[0]]
    if out.id in g.outputs or len(out.consumers) != 1:
        return None
    t = g.node(out.consumers[0])
    if t.op_type != "TRANSPOSE" or list(node_attrs(t).perm) != HEAD_SWAP \
            or node_attrs(t).view or lw.state.folded.get(t.id) \
            or t.id in lw.lowering_plan.fused \
            or t.id in lw.lowering_plan.read_through:
        return None  # (a transpose a later QDQ already reads through stays that QDQ's)
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(t.outputs[0])
    if not _four_d(x) or not x.contiguous or not _four_d(y):
        return None
    return QdqLayout(t, y, x, False, False)


def qdq_layout(lw: Lowering, n: LayerIR) -> QdqLayout | None:
    """The head transpose a tileable QDQ folds (module doc), or None."""
    if n.op_type != "QDQ" or qdq_params(lw, n) is None or lw.g.tensors[n.inputs[0]].const \
            or qdq_bypassed(lw, n):  # its GEMMs quantize the transpose's output themselves
        return None
    return _input_transpose(lw, n) or _output_transpose(lw, n)


def folded_input_transposes(lw: Lowering) -> dict[str, str]:
    """Transposes a later QDQ reads through (transpose id → QDQ id): they get no op."""
    out = {}
    for n in lw.g.nodes:
        lay = qdq_layout(lw, n) if n.op_type == "QDQ" else None
        if lay is not None and lay.input_side:
            out[lay.transpose.id] = n.id
    return out


def written_through(lw: Lowering) -> dict[str, str]:
    """Transposes a QDQ writes its output through (transpose id → QDQ id): they get no
    op. Decided with the input-side ones already in the lowering plan (`read_through`)."""
    out = {}
    for n in lw.g.nodes:
        lay = qdq_layout(lw, n) if n.op_type == "QDQ" else None
        if lay is not None and not lay.input_side:
            out[lay.transpose.id] = n.id
    return out


def qdq_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Does the QDQ lowering tile layer `n` (False: it runs whole)? A QDQ folding a head
    transpose is tiled; any other needs per-tensor 8-bit parameters (`qdq_params`) and
    contiguous fp32 input and output of one shape (a constant input, e.g. a float weight
    behind a QDQ, is read as is by its reader)."""
    if qdq_layout(lw, n) is not None:
        return True
    x = lw.placement(n.inputs[0])
    y = lw.plan.placements.get(n.outputs[0])
    return qdq_params(lw, n) is not None and y is not None and x.dtype == "fp32" \
        and y.dtype == "fp32" and x.contiguous and y.contiguous and x.shape == y.shape


def layout_blocks(lw: Lowering, lay: QdqLayout) -> list[tuple[int, int, int, int]]:
    """(batch, head, first position, positions) of each block of a QDQ folding head
    transpose `lay`: per (b, h) of the (B, H, ·, ·) side, blocks of the sequence that fit
    a bank. The QDQ's tiles cut them and the plan pass counts them (each draws a PE)."""
    bsz, s_len, heads, d = lay.strided.shape
    per = max(1, min(s_len, lw.bank // (d * 4)))
    return [(b, h, s0, min(per, s_len - s0)) for b in range(bsz) for h in range(heads)
            for s0 in range(0, s_len, per)]


def plain_rows(lw: Lowering, x: Placement) -> list[tuple[int, int]]:
    """(first row, rows) of the row blocks of a tiled QDQ folding no transpose over input
    `x`'s last axis: one per PE, at most a bank each (each draws a PE)."""
    rows, cols = rows_cols(x)
    per = max(1, min(rows, lw.bank // (cols * 4), math.ceil(rows / lw.n_pes)))
    return [(r0, min(per, rows - r0)) for r0 in range(0, rows, per)]
