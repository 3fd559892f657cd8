"""Scaled dot-product attention at the TE's precision (the IR's ATTENTION layer).

q [B, Hq, S, D], k / v [B, Hkv, T, D] (grouped-query: each K/V head serves Hq / Hkv query
heads), optional mask (bool: True = attend, or an additive float bias) over the last
axis (padded to T when shorter), optional causal mask (column j > row i + offset).
Integer `a_bits` and `kv_bits` quantize Q at a_bits and K / V at kv_bits (static
{"scale", "zero_point", "signed"} dicts or dynamic symmetric), multiply exactly, and
quantize the probabilities with a per-row scale; float modes round the operands.
`kv_block` (integer modes, fewer keys than T) computes the same attention block by block
along the KV sequence with an online softmax (`kernbench.numerics.flash`); `kv_parts`
(integer modes) splits the keys into that many ranges, each blocked alone and combined
(flash-decoding).
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics import quant as qmath
from kernbench.numerics.flash import blocked_attention
from kernbench.numerics.softmax import attention_probs
from kernbench.numerics.wide import work

__all__ = ["attention", "mask_to_bias"]


def mask_to_bias(mask: np.ndarray, t_len: int) -> np.ndarray:
    """An attention mask as an additive fp32 bias over `t_len` columns (bool: 0 / -inf;
    a shorter mask is padded with "masked")."""
    if mask.shape[-1] < t_len:
        padv = False if mask.dtype == np.bool_ else -np.inf
        mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, t_len - mask.shape[-1])],
                      constant_values=padv)  # fmt: skip
    return (np.where(mask, np.float32(0), np.float32(-np.inf))
            if mask.dtype == np.bool_ else mask.astype(np.float32))


def _scores(q, k, scale, a_bits, kv_bits, statics) -> np.ndarray:  # noqa: ANN001
    if isinstance(a_bits, int) and isinstance(kv_bits, int):
        qq, sq, _ = qmath.quantize_activation(q, a_bits, statics[0])
        kq, sk, _ = qmath.quantize_activation(k, kv_bits, statics[1])
        acc = qmath.int_matmul(qq, np.swapaxes(kq, -1, -2))
        return acc.astype(np.float32) * (np.float32(sq) * np.float32(sk) * scale)
    sc = np.sqrt(scale)
    return (q * sc) @ (np.swapaxes(k, -1, -2) * sc)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
              *, num_heads: int, num_kv_heads: int, scale: float, softcap: float = 0.0,
              causal_offset: int | None = None, a_bits: int | str | None = None,
              kv_bits: int | str | None = None, q_static: dict | None = None,
              k_static: dict | None = None, v_static: dict | None = None,
              kv_block: int | None = None, kv_parts: int | None = None,
              kv_first: int | None = None) -> np.ndarray:
    """softmax(q·kᵀ·scale (+ softcap) + masks) · v, in q's dtype (see the module doc)."""
    dtype = q.dtype
    q, k, v = (work(x) for x in (q, k, v))
    rep = num_heads // num_kv_heads
    if rep > 1:
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
    integer = isinstance(a_bits, int) and isinstance(kv_bits, int)
    if not integer:
        if a_bits in ("fp16", "bf16"):
            q = qmath.round_to_float(q, a_bits)
        if kv_bits in ("fp16", "bf16"):
            k = qmath.round_to_float(k, kv_bits)
            v = qmath.round_to_float(v, kv_bits)
    parts = int(kv_parts or 1)
    blocked = bool(kv_block) and int(kv_block) < k.shape[-2]
    if integer and (blocked or parts > 1) and not softcap:
        return _blocked(q, k, v, mask, scale, causal_offset, int(kv_block or 0) if blocked
                        else 0, a_bits, kv_bits, (q_static, k_static, v_static),
                        parts, int(kv_first or 0)).astype(dtype)
    s = _scores(q, k, np.float32(scale), a_bits, kv_bits, (q_static, k_static))
    if softcap:
        cap = np.float32(softcap)
        s = np.tanh(s / cap) * cap
    bias = mask_to_bias(mask, s.shape[-1]) if mask is not None else None
    p = attention_probs(s, bias, causal_offset)
    if integer:
        # probabilities: a per-row scale (max of the row / qmax), so flat rows of long
        # sequences keep their resolution
        ps = qmath.row_scale(p, a_bits)
        pq = qmath.quantize_rows(p, ps, a_bits)
        vq, sv, _ = qmath.quantize_activation(v, kv_bits, v_static)
        acc = qmath.int_matmul(pq, vq)
        y = acc.astype(np.float32) * (ps * np.float32(sv))
    else:
        y = p @ v
    return y.astype(dtype)


def _blocked(q, k, v, mask, scale, causal_offset, kv_block, a_bits, kv_bits,  # noqa: ANN001
             statics, kv_parts, kv_first) -> np.ndarray:  # fmt: skip
    """The integer attention blocked along the KV sequence and / or split into `kv_parts`
    key ranges (`numerics.flash`)."""
    qq, sq, _ = qmath.quantize_activation(q, a_bits, statics[0])
    kq, sk, _ = qmath.quantize_activation(k, kv_bits, statics[1])
    vq, sv, _ = qmath.quantize_activation(v, kv_bits, statics[2])
    bias = mask_to_bias(mask, k.shape[-2]) if mask is not None else None
    return blocked_attention(qq, kq, vq, bias, causal_offset, kv_block=kv_block,
                             score_scale=np.float32(sq) * np.float32(sk) * np.float32(scale),
                             sv=float(np.float32(sv)), a_bits=a_bits, kv_parts=kv_parts,
                             kv_first=kv_first)
