"""The data side of CMDQ programs (ADR-0020 for the compiler's front end).

Each entry's command carries a `"data"` description on the stage that does the work, so
the component hooks log it and the DataExecutor computes it in pass 2:
- DMA_LOAD / DMA_STORE → memory `dma` (2-D when strided) between HBM and the PE's TCM;
- TE_GEMM_TILE → `gemm` on TCM operands (int8 / int4 × int8 → int32 exact, float → fp32);
- VE_*_TILE → `math` ops on TCM (quantize, dequantize with scale vector and bias,
  softmax with additive mask and causal offset, layernorm, rmsnorm, gelu, silu, add,
  mul, cast);
- TE_CONV_TILE → `conv` (NHWC ifm, [kh, kw, c_in, c_out] weight, the GEMM's dtypes);
- VE_ROPE_TILE → `rope` with its cos / sin tables, `head_dim` and `style`;
- VE_LAYER_OP / TE_LAYER_OP: host/bundle.py describes them (the IR layer's numerics
  kernel and plain params; this module knows no IR).
Element types come from the qbits fields (8 → int8, 4 → int4 packed, 16 → fp16,
32 → fp32; a TE accumulator is int32 when both operands are integers) and the optional
`in_dtype` field.
"""

from __future__ import annotations

from typing import Any

from kernbench.errors import InputError
from kernbench.numerics.dtypes import dtype_for_bits

_VE_OP = {
    "VE_QUANTIZE_TILE": "quantize", "VE_REQUANTIZE_TILE": "quantize",
    "VE_DEQUANTIZE_TILE": "cmdq_dequantize", "VE_SOFTMAX_TILE": "attn_softmax",
    "VE_LAYERNORM_TILE": "layernorm", "VE_RMSNORM_TILE": "rmsnorm", "VE_GELU_TILE": "gelu",
    "VE_SILU_TILE": "silu", "VE_ADD_TILE": "add", "VE_MUL_TILE": "mul", "VE_COPY_TILE": "cast",
    "VE_ROWSCALE_TILE": "cmdq_row_scale", "VE_ROPE_TILE": "rope",
}


def dtype_of(bits: int, integer: bool = True) -> str:
    """Element type of `bits`-wide CMDQ data (numerics.dtypes.dtype_for_bits)."""
    return dtype_for_bits(bits, integer)


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


def conv_data(e: Any, tcm_space: str, addr) -> dict[str, Any]:  # noqa: ANN001
    """TE_CONV_TILE: the `conv` math op on its TCM operands (types as gemm_data)."""
    qa, qw = e.qbits_activation, e.qbits_weight
    acc = "int32" if qa <= 8 and qw <= 8 else "float32"
    h_out, w_out = e.out_hw
    out = [e.n, h_out, w_out, e.c_out]
    d: dict[str, Any] = {
        "op_kind": "math", "op_name": "te_conv_tile", "op": "conv", "space": tcm_space,
        "input_addrs": [addr("ifm"), addr("wgt")],
        "input_shapes": [[e.n, e.h, e.w, e.c_in], [e.kh, e.kw, e.c_in, e.c_out]],
        "input_dtypes": [dtype_of(qa, False), dtype_of(qw, False)], "dst_addr": addr("ofm"),
        "shape_out": out, "dtype": acc, "stride": e.stride, "padding": e.padding,
        "has_bias": e.bias_bank is not None, "accumulate": bool(e.accumulate)}
    if e.bias_bank is not None:
        d["input_addrs"].append(addr("bias"))
        d["input_shapes"].append([e.c_out])
        d["input_dtypes"].append(dtype_of(e.bias_qbits, acc == "int32"))
    if e.accumulate:
        d["input_addrs"].append(addr("ofm"))
        d["input_shapes"].append(out)
        d["input_dtypes"].append(acc)
    return d


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
    elif op == "rope":
        if e.cos_bank is None or e.sin_bank is None:
            raise InputError(f"entry {e.id}: VE_ROPE_TILE needs cos_bank and sin_bank: the "
                             "data pass has no rotation tables otherwise", field="cos_bank")
        half = [rows, e.head_dim_or_length // 2]
        add("cos", half, dtype_of(e.param_qbits, integer=False))
        add("sin", half, dtype_of(e.param_qbits, integer=False))
        extra = {"head_dim": e.head_dim_or_length, "style": e.style}
    elif op in ("add", "mul"):
        rows2 = e.in2_rows if e.in2_rows is not None else rows
        add("in2", [rows2, length], dtype_of(e.in2_qbits or e.qbits_activation, integer=False))
    shape_out = [rows, 1] if op == "cmdq_row_scale" else [rows, length]
    return {"op_kind": "math", "op_name": e.opcode.lower(), "op": op, "space": tcm_space,
            "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dtypes,
            "dst_addr": addr("out"), "shape_out": shape_out, "dtype": out_dt, **extra}
