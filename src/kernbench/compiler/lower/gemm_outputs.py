"""Which outputs of a GEMM-shaped layer its tiles will write, told without tiling it.

The plan pass decides, per output of a GEMM, QKV_PROJ or tiled MATMUL_INTEGER, what the
epilogue does with it (a fused consumer, an int8 copy for an attention, the new rows of a
KV cache). It asks `tiled_outputs`, which gives the same answer `gemm.gemm` reaches when
it tiles the layer (a weight the tiles can store, an activation `prepare_x` can prepare,
a contiguous float output of M × N elements), reading the graph and the memory plan
only: it prepares, places and emits nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.activation import preparable, preparable_rows, te_mode
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import FLOAT_DTYPES, Lowering
from kernbench.compiler.lower.te_weights import te_weight
from kernbench.ir.model import LayerIR


class TiledOutput(NamedTuple):
    """An output a GEMM-shaped layer's tiles write: its tensor and placement, M and N."""

    tid: str
    placement: Placement
    m: int
    nn: int


def tiled_outputs(lw: Lowering, n: LayerIR) -> tuple[str, list[TiledOutput]]:
    """(TE mode, the outputs the tiles of layer `n` write); no outputs when `n` is not a
    GEMM, QKV_PROJ or MATMUL_INTEGER the tiles compute."""
    if n.op_type == "MATMUL_INTEGER":
        im = lw.lowering_plan.integer_matmuls.get(n.id)
        if im is None:
            return "int", []
        dq = lw.g.node(lw.g.tensors[n.inputs[0]].producer)
        return "int", _fits(lw, [(im.out_tid, rows_cols(lw.placement(dq.inputs[0]))[0],
                                  int(im.weight.shape[1]))])
    if n.op_type not in ("GEMM", "QKV_PROJ"):
        return "", []
    weights = [n.inputs[1]] if n.op_type == "GEMM" else list(n.inputs[1:4])
    mode = te_mode(n)
    if mode is None or not all(lw.g.tensors[w].const for w in weights):
        return "", []
    wps = [te_weight(lw, n, w, mode) for w in weights]
    bits = n.qbits_activation if mode in ("int", "int16", "dq") else 16  # as `gemm_layer._te_inputs`
    m = preparable_rows(lw, n.inputs[0], mode, bits)
    if m is None or any(wp is None for wp in wps):
        return mode, []
    return mode, _fits(lw, [(out, m, int(wp.shape[1]))
                            for out, wp in zip(n.outputs, wps, strict=False) if wp is not None])


def gemm_tiled(lw: Lowering, n: LayerIR) -> bool:
    """Does the GEMM / QKV_PROJ lowering tile layer `n` (False: it runs whole)? It does
    when the tensor engine reads its constant weights at the layer's precision (the
    plan's TE weights) and `prepare_x` gives its activation; a GEMM also needs an output
    its tiles store (`tiled_outputs`). A QKV_PROJ whose outputs the tiles cannot store
    is refused, not run whole."""
    weights = [n.inputs[1]] if n.op_type == "GEMM" else list(n.inputs[1:4])
    mode = te_mode(n)
    if mode is None or not all(lw.g.tensors[w].const for w in weights) \
            or any(te_weight(lw, n, w, mode) is None for w in weights):
        return False
    bits = n.qbits_activation if mode in ("int", "int16", "dq") else 16
    if not preparable(lw, n.inputs[0], mode, bits):
        return False
    if n.op_type == "QKV_PROJ":
        return True
    stored = lw.lowering_plan.quant_stored(n.inputs[0]) if mode == "int" else None
    if stored is not None and stored.bits == bits:  # its producer's quantized copy
        shape = lw.g.tensors[n.inputs[0]].shape
        m = int(np.prod(shape[:-1])) if shape else 1
    else:
        m = preparable_rows(lw, n.inputs[0], mode, bits)
        assert m is not None
    wp = te_weight(lw, n, n.inputs[1], mode)
    assert wp is not None
    return bool(_fits(lw, [(n.outputs[0], m, int(wp.shape[1]))]))


def _fits(lw: Lowering, outs: list[tuple[str, int, int]]) -> list[TiledOutput]:
    """The outputs stored contiguous, as a float, with M × N elements."""
    found = []
    for tid, m, nn in outs:
        op = lw.plan.placements[tid]
        if op.contiguous and op.dtype in FLOAT_DTYPES and int(np.prod(op.shape)) == m * nn:
            found.append(TiledOutput(tid, op, m, nn))
    return found
