"""The data side of CMDQ programs (ADR-0020 for the compiler's front end).

Each entry's command carries a `"data"` description on the stage that does the work, so
the component hooks log it and the DataExecutor computes it in pass 2:
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

_VE_OP = {
    "VE_QUANTIZE_TILE": "quantize", "VE_REQUANTIZE_TILE": "quantize",
    "VE_DEQUANTIZE_TILE": "cmdq_dequantize", "VE_SOFTMAX_TILE": "attn_softmax",
    "VE_LAYERNORM_TILE": "layernorm", "VE_RMSNORM_TILE": "rmsnorm", "VE_GELU_TILE": "gelu",
    "VE_SILU_TILE": "silu", "VE_ADD_TILE": "add", "VE_MUL_TILE": "mul", "VE_COPY_TILE": "cast",
    "VE_ROWSCALE_TILE": "cmdq_row_scale",
}


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


def dma_data(e: Any, tcm_space: str, tcm_addr: int) -> dict[str, Any]:
    dr = e.dram_range()
    d: dict[str, Any] = {"op_kind": "memory", "op_name": "dma"}
    if dr.write:
        d.update(src_space=tcm_space, src_addr=tcm_addr, dst_space="hbm", dst_addr=dr.addr)
    else:
        d.update(src_space="hbm", src_addr=dr.addr, dst_space=tcm_space, dst_addr=tcm_addr)
    d["nbytes"] = dr.nbytes
    if dr.rows > 1:
        hbm_stride, tcm_stride = dr.stride_bytes, dr.row_bytes
        d.update(rows=dr.rows, row_bytes=dr.row_bytes,
                 src_stride=tcm_stride if dr.write else hbm_stride,
                 dst_stride=hbm_stride if dr.write else tcm_stride)
    return d


def gemm_data(e: Any, tcm_space: str, addr) -> dict[str, Any]:  # noqa: ANN001
    qa, qw = e.qbits_activation, e.qbits_weight
    integer = qa <= 8 and qw <= 8
    tw = bool(getattr(e, "transpose_wgt", False))
    acc = "int32" if integer else "float32"
    return {
        "op_kind": "gemm", "op_name": "te_gemm", "space": tcm_space,
        "src_a_addr": addr("ifm"), "src_b_addr": addr("wgt"), "dst_addr": addr("ofm"),
        "shape_a": [e.m, e.k], "shape_b": [e.n, e.k] if tw else [e.k, e.n],
        "shape_out": [e.m, e.n], "dtype_a": dtype_of(qa, False), "dtype_b": dtype_of(qw, False),
        "dtype_acc": acc, "dtype_out": acc, "transpose_a": False, "transpose_b": tw,
        "accumulate": bool(e.accumulate),
    }


def ve_data(e: Any, tcm_space: str, addr) -> dict[str, Any]:  # noqa: ANN001
    op = _VE_OP.get(e.opcode)
    if op is None:
        raise ValueError(f"no data semantics for {e.opcode}")
    rows, length = e.rows, e.length
    in_dt = getattr(e, "in_dtype", None) or dtype_of(e.qbits_activation, integer=False)
    out_dt = dtype_of(e.out_bits, integer=False)
    if op == "quantize":
        out_dt = dtype_of(e.out_bits)
    addrs = [addr("in")]
    shapes = [[rows, length]]
    dtypes = [in_dt]
    extra: dict[str, Any] = {}

    def add(role: str, shape: list[int], dt: str = "float32") -> None:
        addrs.append(addr(role))
        shapes.append(shape)
        dtypes.append(dt)

    if op == "quantize":
        extra = {"scale": e.scale, "zero_point": e.zero_point, "bits": e.out_bits,
                 "signed": True}
        if e.row_scale_bank is not None:
            add("row_scale", [rows, 1])
            op = "cmdq_quantize_rows"
    elif op == "cmdq_row_scale":
        extra = {"bits": e.bits}
        out_dt = "float32"
    elif op == "cmdq_dequantize":
        if e.row_scale_bank is not None:
            add("row_scale", [rows, 1])
            extra["row_scale"] = True
            extra["scale"] = e.scale
        elif e.scale_bank is not None:
            add("scale", [length])
            extra["vector_scale"] = True
        else:
            extra["scale"] = e.scale
        if e.bias_bank is not None:
            add("bias", [length])
            extra["has_bias"] = True
    elif op == "attn_softmax":
        if e.bias_bank is not None:
            add("bias", [rows, length])
            extra["has_bias"] = True
        extra["causal_offset"] = e.causal_offset
        extra["scale"] = e.scale
    elif op in ("layernorm", "rmsnorm"):
        extra = {"eps": e.eps, "axis": -1}
        for role in ("gamma", "beta"):
            if getattr(e, f"{role}_bank", None) is not None:
                add(role, [length])
    elif op == "gelu":
        extra = {"approximate": e.approximate}
    elif op in ("add", "mul"):
        rows2 = e.in2_rows if e.in2_rows is not None else rows
        add("in2", [rows2, length], dtype_of(e.in2_qbits or e.qbits_activation, integer=False))
    shape_out = [rows, 1] if op == "cmdq_row_scale" else [rows, length]
    return {"op_kind": "math", "op_name": e.opcode.lower(), "op": op, "space": tcm_space,
            "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dtypes,
            "dst_addr": addr("out"), "shape_out": shape_out, "dtype": out_dt, **extra}


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

