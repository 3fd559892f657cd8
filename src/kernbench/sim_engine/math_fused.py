"""The data pass's fused math ops, all on kernbench.numerics (never on compiler IR).

- softmax (`axis`, `scale`, `causal_offset`), layernorm, rmsnorm, rope: the numerics
  kernels the IR interpreter uses, so results are bit-identical to it.
- quantize / dequantize / requantize / dequant_scale: kernbench.numerics.quant.
- the CMDQ vector tiles' ops: cmdq_dequantize (acc × scale (+ bias)), cmdq_row_scale,
  cmdq_quantize_rows, attn_softmax (attention's masked softmax on a row block),
  flash_softmax_block / flash_merge / flash_combine (attention blocked along the KV
  sequence, and split over PEs).
- conv, pool, reduce_rows, clip: the window ops, in math_window.
- layer: a whole IR layer by its numerics layer kernel (`kernel`, `params`), the same
  call the IR interpreter makes; writes several outputs (`dst_addrs`).
The param contract of each op is in docs/data-pass.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics import quant as qmath
from kernbench.numerics.dtypes import np_dtype
from kernbench.numerics.flash import combine_part, merge_block, softmax_block
from kernbench.numerics.layers import run_layer
from kernbench.numerics.norms import layernorm, rmsnorm
from kernbench.numerics.rope import rope, rope_interleaved
from kernbench.numerics.softmax import attention_probs, softmax
from kernbench.sim_engine.math_registry import fl, math_op, widen


@math_op("softmax")
def _softmax(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """softmax over `axis` (default -1); optional `scale` multiplies x first; optional
    `causal_offset` masks column j > row i + offset (last axis only); fully masked rows
    give 0."""
    x = fl(ins[0]).astype(np.float32)
    axis = p.get("axis", -1)
    axis = -1 if axis is None else axis
    if p.get("scale") is not None:
        x = x * np.float32(p["scale"])
    if p.get("causal_offset") is not None and x.ndim >= 2:
        if axis not in (-1, x.ndim - 1):
            raise ValueError("softmax with causal_offset runs over the last axis")
        return attention_probs(x, None, int(p["causal_offset"]))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return softmax(x, axis)


@math_op("layernorm")
def _layernorm(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Normalise over the axes from `axis` (default -1) on; inputs x[, gamma[, beta]]."""
    x = ins[0]
    axis = p.get("axis", -1)
    axis = (axis if axis is not None else -1) % x.ndim
    gamma = ins[1] if len(ins) > 1 else np.ones(x.shape[axis:], np.float32)
    beta = widen(ins[2]) if len(ins) > 2 else None
    return layernorm(widen(x), widen(gamma), beta, axis=axis, eps=float(p.get("eps", 1e-5)))[0]


@math_op("rmsnorm")
def _rmsnorm(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    x = ins[0]
    axis = p.get("axis", -1)
    axis = (axis if axis is not None else -1) % x.ndim
    gamma = widen(ins[1]) if len(ins) > 1 else None
    return rmsnorm(widen(x), gamma, axis=axis, eps=float(p.get("eps", 1e-6)))


@math_op("rope")
def _rope(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Rotary embedding of x [rows, length] by cos / sin: either full width (broadcast
    to x, the IR's form) or the CMDQ tables [rows, head_dim / 2] with `head_dim` (heads
    side by side in a row) and `style` "half" | "interleaved"."""
    x, cos, sin = (widen(i) for i in ins[:3])
    hd = p.get("head_dim")
    if hd is None:
        return rope(x, cos, sin)
    rows, length = x.shape[0], x.shape[-1]
    xh = x.reshape(rows, length // hd, hd)
    c = np.asarray(cos, np.float32).reshape(rows, 1, hd // 2)
    s = np.asarray(sin, np.float32).reshape(rows, 1, hd // 2)
    if p.get("style", "half") == "interleaved":
        y = rope_interleaved(xh, c, s)
    else:
        y = rope(xh, np.concatenate([c, c], -1), np.concatenate([s, s], -1))
    return y.reshape(x.shape)


# ------------------------------------------------------------------ quantization
@math_op("quantize")
def _quantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    scale = ins[1] if len(ins) > 1 else p["scale"]
    return qmath.quantize(fl(ins[0]), np.asarray(scale, np.float32), p.get("zero_point", 0),
                          int(p.get("bits", 8)), bool(p.get("signed", True)),
                          p.get("quant_axis"), int(p.get("block_size", 0)))


@math_op("dequantize")
def _dequantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    scale = ins[1] if len(ins) > 1 else p["scale"]
    return qmath.dequantize(ins[0], np.asarray(scale, np.float32), p.get("zero_point", 0),
                            p.get("quant_axis"), int(p.get("block_size", 0)))


@math_op("requantize")
def _requantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    mult = ins[1] if len(ins) > 1 else p.get("multiplier", p.get("scale"))
    return qmath.requantize(ins[0], np.asarray(mult, np.float32), p.get("zero_point", 0),
                            int(p.get("bits", 8)), bool(p.get("signed", True)))


@math_op("dequant_scale")
def _dequant_scale(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """int32 accumulator × scale (scalar or per-output-channel vector) → float32."""
    scale = ins[1] if len(ins) > 1 else p["scale"]
    return (np.asarray(ins[0]).astype(np.float32) * np.asarray(scale, np.float32)).astype(
        np.float32)


# ------------------------------------------------------------------ CMDQ vector tiles
@math_op("cmdq_dequantize")
def _cmdq_dequantize(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """acc × scale (+ bias): the interpreter's `acc.astype(f32) * (sx·sw)` then `+ bias`.
    The scale is `scale`, a per-row input × `scale` (`row_scale`) or a per-column input
    (`vector_scale`); `has_bias` adds the next input ([length]), `has_row_bias` the next
    ([rows, 1])."""
    x = np.asarray(ins[0]).astype(np.float32)
    i = 1
    if p.get("tcm_scale"):  # a run-time scalar scale read from TCM
        y = x * np.asarray(ins[1], np.float32).reshape(())
        i += 1
    elif p.get("row_scale"):
        y = x * (np.asarray(ins[1], np.float32) * np.float32(p["scale"]))
        i += 1
    elif p.get("vector_scale"):
        y = x * np.asarray(ins[i], np.float32)
        i += 1
    else:
        y = x * np.float32(p["scale"])
    if p.get("has_bias"):
        y = y + np.asarray(ins[i], np.float32)
        i += 1
    if p.get("has_row_bias"):  # [rows, 1]: a conv tile's rows are its output channels
        y = y + np.asarray(ins[i], np.float32)
    return y.astype(np.float32)


@math_op("cmdq_row_scale")
def _cmdq_row_scale(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Per-row scale max|x| / qmax at `bits` ([rows, 1] fp32)."""
    return qmath.row_scale(np.asarray(ins[0], np.float32), int(p["bits"]))


@math_op("cmdq_quantize_rows")
def _cmdq_quantize_rows(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """x quantized at `bits` with the per-row scale of the second input."""
    return qmath.quantize_rows(ins[0], ins[1], int(p["bits"]))


@math_op("cmdq_quantize_qparams")
def _cmdq_quantize_qparams(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """x quantized with the run-time (scale, zero point) of the second input, the field
    `zero_point` added to that zero point; a zero scale (an all-zero tensor) gives the
    zero point, as DynamicQuantizeLinear does."""
    qp = np.asarray(ins[1], np.float32).reshape(-1)
    zp = int(qp[1]) + int(p.get("zero_point", 0))
    bits, signed = int(p["bits"]), bool(p.get("signed", True))
    x = fl(ins[0])
    if qp[0] == 0:
        return qmath.quantize(np.zeros_like(x), np.float32(1), zp, bits, signed)
    return qmath.quantize(x, qp[0], zp, bits, signed)


@math_op("cmdq_dynamic_qparams")
def _cmdq_dynamic_qparams(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """(scale, zero point) fp32 of DynamicQuantizeLinear from partial minima and maxima."""
    scale, zp = qmath.dynamic_qparams(float(np.min(ins[0])), float(np.max(ins[1])))
    return np.array([scale, np.float32(zp)], np.float32)


@math_op("cmdq_zp_correction")
def _cmdq_zp_correction(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """−(zp + `zero_point`) · colsum in int64, as int32 (zp: the second qparams value)."""
    zp = int(np.asarray(ins[1], np.float32).reshape(-1)[1]) + int(p.get("zero_point", 0))
    return (-zp * np.asarray(ins[0]).astype(np.int64)).astype(np.int32)


@math_op("attn_softmax")
def _attn_softmax(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """Attention's masked softmax on a row block: `scale`, the soft-cap c·tanh(s / c) when
    `softcap`, an additive bias input when `has_bias`, `causal_offset` (None: not
    causal) — the order of numerics.attention."""
    s = np.asarray(ins[0], np.float32)
    if p.get("scale", 1.0) != 1.0:
        s = s * np.float32(p["scale"])
    if p.get("softcap"):
        cap = np.float32(p["softcap"])
        s = np.tanh(s / cap) * cap
    bias = np.asarray(ins[1], np.float32) if p.get("has_bias") else None
    return attention_probs(s, bias, p.get("causal_offset")).astype(np.float32)


@math_op("flash_softmax_block")
def _flash_softmax_block(ins: list[np.ndarray], p: dict[str, Any]) -> list[np.ndarray]:
    """One online-softmax block (numerics.flash.softmax_block): inputs scores, [bias,]
    state; outputs e and the new state."""
    bias = np.asarray(ins[1], np.float32) if p.get("has_bias") else None
    e, st = softmax_block(np.asarray(ins[0], np.float32), bias, p.get("causal_offset"),
                          np.asarray(ins[-1], np.float32))
    return [e, st]


@math_op("flash_merge")
def _flash_merge(ins: list[np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """A block's P·V into the running output (numerics.flash.merge_block): inputs acc,
    row_scale, state [, old out]."""
    old = None if p.get("first") else ins[3]
    return merge_block(old, ins[0], ins[1], float(p["scale"]), np.asarray(ins[2], np.float32),
                       bool(p.get("last")))


@math_op("flash_combine")
def _flash_combine(ins: list[np.ndarray], p: dict[str, Any]) -> list[np.ndarray]:
    """Key ranges' partial outputs into the running one, in order
    (numerics.flash.combine_part): inputs part outs [parts, rows, D], part states
    [parts, rows, 4], state, out; outputs out and the new state (`last`: divided by l
    after the last part)."""
    o_p, st_p = np.asarray(ins[0]), np.asarray(ins[1])
    if o_p.ndim == 2:  # one part (an op log written before `parts`)
        o_p, st_p = o_p[None], st_p[None]
    o, st = ins[3], ins[2]
    for i in range(o_p.shape[0]):
        o, st = combine_part(o, st, o_p[i], st_p[i],
                             bool(p.get("last")) and i == o_p.shape[0] - 1)
    return [o, st]


# ------------------------------------------------------------------ whole layers
@math_op("layer")
def _layer(ins: list[np.ndarray], p: dict[str, Any]) -> list[np.ndarray]:
    """A whole IR layer: the numerics layer kernel `kernel` with `params` (the IR
    interpreter's own call). `args` lays out the kernel's inputs: "in" (the next input
    read from memory; dequantized with its `input_scales` entry when that is not None),
    "const" (the next array of `consts`) or None (an absent optional input); run_layer
    computes narrow floats in fp32, as the interpreter does. Returns the kernel
    outputs `outputs` (indices), each cast to its `cast` dtype when that is not None."""
    scales = p.get("input_scales") or [None] * len(ins)
    reads = iter([x if s is None else qmath.dequantize(x, np.float32(s), 0)
                  for x, s in zip(ins, scales, strict=True)])
    consts = iter(p.get("consts", ()))
    args = [None if kind is None else next(reads) if kind == "in" else np.asarray(next(consts))
            for kind in p["args"]]
    outs = run_layer(p["kernel"], args, p.get("params", {}))
    got = []
    for j, cast_to in zip(p["outputs"], p.get("cast") or [None] * len(p["outputs"]),
                          strict=True):
        y = np.asarray(outs[j])
        got.append(y.astype(np_dtype(cast_to)) if cast_to and y.dtype != np_dtype(cast_to)
                   else y)
    return got
