"""What every tile of one float attention layer reads (`FloatAttention`) and how a float
operand's rows reach TCM (`load_rows`). Its own module so that the unblocked lowering
(attention_float) and the KV-block loop (attention_float_kv) import it and never each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering, float_format
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR

#: integer cache storage a float attention dequantizes on load, and its bits
INT_CACHE = {"int8": 8, "int16": 16}


@dataclass(frozen=True)
class FloatAttention:
    """What every tile of one float attention layer needs."""

    q: Placement
    k: Placement
    v: Placement
    out: Placement
    mask: Placement | None
    scale: float
    softcap: float
    causal_offset: int | None
    s_blk: int
    q_fmt: str | None = None   # fp16 / bf16: Q rounded to it before the TE; None: fp32
    kv_fmt: str | None = None  # the same for K and V
    te: dict[str, str] = field(default_factory=dict)  # the TE tiles' f16_format field
    kv_block: int = 0          # keys per KV block (0: the whole K / V at once)
    kv_scales: tuple[float, float] | None = None  # K, V scales of an int-stored cache


def stored_ok(p: Placement, fmt: str | None, int_cache: bool = False) -> bool:
    """Can `load_rows` bring `p`'s rows to format `fmt` (fp32 rows, rows already stored in
    that 16-bit format, or with `int_cache` an int8 / int16-stored cache dequantized to fp32)?"""
    return p.strides[3] == 1 and (p.dtype == "fp32" or fmt is not None and p.dtype == fmt
                                  or int_cache and fmt is None and p.dtype in INT_CACHE)


def load_rows(lw: Lowering, n: LayerIR, pe: int, p: Placement, off: int, rows: int,
              cols: int, tag: str, role: str = "activation", fmt: str | None = None,
              scale: float | None = None) -> Buf:
    """fp32 rows of `p` into TCM; with `fmt` (fp16 / bf16) rounded to it by a VE_COPY_TILE
    into a 16-bit buffer, the operand the TE then reads, or moved as they are when `p` is
    stored in that format (a KV cache stored at its 16-bit float width). An int8 / int16 `p` (a
    cache stored at its integer KV width) is dequantized with `scale` into fp32 rows: the
    values KV_UPDATE's fake quantization gives the interpreter."""
    if fmt is not None and p.dtype == fmt:
        h = lw.buf(pe, rows * cols * 2, f"{n.id}.{tag}h")
        lw.dma(False, pe, h, p, off, rows, cols, p.strides[2], n.id, role=role)
        return h
    b = lw.buf(pe, rows * cols * 4, f"{n.id}.{tag}")
    if p.dtype in INT_CACHE and scale is not None and fmt is None:
        bits = INT_CACHE[p.dtype]
        bq = lw.buf(pe, rows * cols * bits // 8, f"{n.id}.{tag}q")
        lw.dma(False, pe, bq, p, off, rows, cols, p.strides[2], n.id, role=role)
        lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
              {"length": cols, "rows": rows, "qbits_activation": bits, "out_qbits": 32,
               "scale": float(scale), "in_dtype": p.dtype, **lw.engines.ve(pe)},
              reads=[("in", bq)], writes=[("out", b)], frees=[bq])
        return b
    lw.dma(False, pe, b, p, off, rows, cols, p.strides[2], n.id, role=role)
    if fmt is None:
        return b
    h = lw.buf(pe, rows * cols * 2, f"{n.id}.{tag}h")
    lw.op("VE_COPY_TILE", pe, n.id,
          {"length": cols, "rows": rows, "qbits_activation": 32, "out_qbits": 16,
           **lw.engines.ve(pe), **float_format(fmt)},
          reads=[("in", b)], writes=[("out", h)], frees=[b])
    return h


__all__ = ["FloatAttention", "load_rows"]
