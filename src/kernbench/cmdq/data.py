"""The data side of CMDQ programs (ADR-0020 for the compiler's front end).

Each entry's command carries a `"data"` description on the stage that does the work, so
the component hooks log it and the DataExecutor computes it in pass 2. Each opcode class
builds its own description (its ``data`` method, `kernbench.cmdq.opcodes`, ADR-0204);
this module holds the element-type rule they share and CMDQ-only math ops:
- DMA_LOAD / DMA_STORE → memory `dma` (2-D when strided) between HBM and the PE's TCM;
- TE_GEMM_TILE → `gemm` on TCM operands (int8 / int4 × int8 → int32 exact, float → fp32);
- VE_*_TILE → `math` ops on TCM (quantize, dequantize with scale vector and bias,
  softmax with additive mask and causal offset, layernorm, rmsnorm, gelu, silu, add,
  mul, cast);
- VE_LAYER_OP / TE_LAYER_OP → `ir_layer`: the IR layer's reference kernel on its HBM
  tensors (the compiler's fallback for layers it does not tile).
Element types come from the qbits fields (8 → int8, 4 → int4 packed, 16 → fp16,
32 → fp32; a TE accumulator is int32 when both operands are integers) and the optional
`in_dtype` field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.sim_engine.math_ops import math_op


def dtype_of(bits: int, integer: bool = True) -> str:
    if bits == 32:
        return "int32" if integer else "float32"
    if bits == 16:
        return "float16"
    if bits == 8:
        return "int8"
    if bits == 4:
        return "int4"
    raise ValueError(f"no element type for {bits}-bit data")


# --------------------------------------------------------------------------- math ops


@math_op("cmdq_dequantize")
def _cmdq_dequantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """acc × scale (+ bias): the interpreter's `acc.astype(f32) * (sx·sw)` then `+ bias`."""
    x = np.asarray(ins[0]).astype(np.float32)
    i = 1
    if p.get("row_scale"):
        y = x * (np.asarray(ins[1], np.float32) * np.float32(p["scale"]))
        i += 1
    elif p.get("vector_scale"):
        y = x * np.asarray(ins[i], np.float32)
        i += 1
    else:
        y = x * np.float32(p["scale"])
    if p.get("has_bias"):
        y = y + np.asarray(ins[i], np.float32)
    return y.astype(np.float32)


@math_op("cmdq_row_scale")
def _cmdq_row_scale(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from kernbench.numerics import quant as qmath

    return qmath.row_scale(np.asarray(ins[0], np.float32), int(p["bits"]))


@math_op("cmdq_quantize_rows")
def _cmdq_quantize_rows(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from kernbench.numerics import quant as qmath

    return qmath.quantize_rows(ins[0], ins[1], int(p["bits"]))


@math_op("attn_softmax")
def _attn_softmax(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """ATTENTION's softmax: the reference interpreter's own function, on a row block."""
    from kernbench.ir.interpreter import attention_probs

    s = np.asarray(ins[0], np.float32)
    if p.get("scale", 1.0) != 1.0:
        s = s * np.float32(p["scale"])
    bias = np.asarray(ins[1], np.float32) if p.get("has_bias") else None
    return attention_probs(s, bias, p.get("causal_offset")).astype(np.float32)


@math_op("ir_layer")
def _ir_layer(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """A whole IR layer by its reference kernel; `ctx` = (interpreter, layer, output index,
    {input index: constant tensor id})."""
    from kernbench.ir.interpreter import KERNELS
    from kernbench.numerics import quant as qmath

    interp, layer, out_idx, consts = p["ctx"]
    scales = p.get("input_scales") or [None] * len(ins)
    ins = [x if s is None else qmath.dequantize(x, np.float32(s), 0)
           for x, s in zip(ins, scales, strict=True)]
    args: list[Any] = []
    it = iter(ins)
    for i, tid in enumerate(layer.inputs):
        if not tid:
            args.append(None)
        elif i in consts:
            args.append(interp.const_value(tid))
        else:
            args.append(next(it))
    # the interpreter holds fp16-mode values in fp32 arrays: widen fp16 storage the same way
    args = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float16 else a
            for a in args]
    outs = KERNELS[layer.op_type](interp, layer, args)
    y = np.asarray(outs[out_idx])
    t = interp.g.tensors[layer.outputs[out_idx]]
    from kernbench.ir.interpreter import np_dtype

    want = np_dtype(t.dtype) if t.quant is None else y.dtype
    return y.astype(want) if y.dtype != want else y

