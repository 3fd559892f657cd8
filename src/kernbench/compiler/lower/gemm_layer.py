"""GEMM and QKV_PROJ layers: the activation prepared once (`activation.prepare_x`), then
the GEMM tiles of each weight (`gemm.gemm`). A layer whose weights are not constants, or
that the tensor engine cannot read at its precision, returns False and runs whole
(`gemm_outputs.gemm_tiled`, which the plan pass asks too)."""

from __future__ import annotations

from kernbench.compiler.lower.activation import prepare_x, te_mode
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.gemm import gemm
from kernbench.compiler.lower.gemm_outputs import gemm_tiled
from kernbench.compiler.lower.te_weights import te_weight
from kernbench.compiler.lower.values import PreparedX
from kernbench.ir.model import LayerIR


def _te_inputs(lw: Lowering, n: LayerIR, weights: list[str]) -> tuple[str, PreparedX] | None:
    """(mode, prepared activation) when the layer can be tiled, else None."""
    mode = te_mode(n)
    if mode is None or not all(lw.g.tensors[t].const for t in weights):
        return None
    if any(te_weight(lw, n, w, mode) is None for w in weights):
        return None
    bits = n.qbits_activation if mode in ("int", "int16", "dq") else 16
    prep = prepare_x(lw, n, n.inputs[0], mode, bits)
    return None if prep is None else (mode, prep)


def lower_gemm(lw: Lowering, n: LayerIR) -> bool:
    if not gemm_tiled(lw, n):
        return False
    te = _te_inputs(lw, n, [n.inputs[1]])
    if te is None:
        raise RuntimeError(f"{n.id}: its activation or weight cannot be tiled, yet "
                           "`gemm_tiled` says it can")
    mode, x = te
    b = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
    if not gemm(lw, n, x, n.inputs[1], b, n.outputs[0], mode):
        raise RuntimeError(f"{n.id}: its output cannot be tiled, yet `gemm_tiled` says it can")
    return True


def lower_qkv_proj(lw: Lowering, n: LayerIR) -> bool:
    if not gemm_tiled(lw, n):
        return False
    te = _te_inputs(lw, n, n.inputs[1:4])
    if te is None:
        raise RuntimeError(f"{n.id}: its activation or weights cannot be tiled, yet "
                           "`gemm_tiled` says they can")
    mode, x = te
    # the three projections decide together whether to spread over every cube
    nn_layer = sum(lw.g.tensors[w].shape[-1] for w in n.inputs[1:4])
    for j in range(3):
        b = n.inputs[4 + j] if len(n.inputs) > 4 + j and n.inputs[4 + j] else None
        if not gemm(lw, n, x, n.inputs[1 + j], b, n.outputs[j], mode, nn_layer=nn_layer):
            raise ValueError(f"{n.id}: projection {j} cannot be tiled")
    return True


__all__ = ["lower_gemm", "lower_qkv_proj"]
