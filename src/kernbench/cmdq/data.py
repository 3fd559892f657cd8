"""The data side of CMDQ programs (for the compiler's front end).

Each entry's command carries a `"data"` description on the stage that does the work, so
the component hooks log it and the DataExecutor computes it in pass 2. Each opcode class
builds its own description (its ``data`` method, `kernbench.cmdq.opcodes`) from
plain values, naming a data-pass op of `kernbench.sim_engine` that runs on `numerics`:
- DMA_LOAD / DMA_STORE → memory `dma` (2-D when strided) between HBM and the PE's TCM;
- TE_GEMM_TILE → `gemm` on TCM operands (int8 / int4 × int8 → int32 exact, float → fp32);
- TE_CONV_TILE → `conv` (NHWC) on TCM operands;
- VE_*_TILE → `math` ops on TCM (quantize, dequantize with scale vector and bias,
  softmax with additive mask and causal offset, layernorm, rmsnorm, gelu, silu, rope, add,
  mul, cast, transpose);
- VE_LAYER_OP / TE_LAYER_OP → `layer`: a numerics kernel with plain params on HBM tensors
  (the host attaches it from the bundle; the compiler's whole-layer ops).
Element types come from the qbits fields (8 → int8, 4 → int4 packed, 16 → fp16,
32 → fp32; a TE accumulator is int32 when both operands are integers), the optional
`in_dtype` field and the optional `f16_format` field ("bf16": the entry's 16-bit float
operands are bfloat16, not fp16). This module holds only the element-type rule the classes share.
"""

from __future__ import annotations

from kernbench.numerics.dtypes import dtype_for_bits


def dtype_of(bits: int, integer: bool = True, f16: str | None = None) -> str:
    """Element type of `bits`-wide CMDQ data (numerics.dtypes.dtype_for_bits); 16-bit
    float data is bfloat16 when `f16` (the entry's `f16_format`) is "bf16"."""
    if bits == 16 and not integer and f16 == "bf16":
        return "bfloat16"
    return dtype_for_bits(bits, integer)
