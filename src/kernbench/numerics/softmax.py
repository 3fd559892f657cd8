"""The one softmax, and the masked softmax of attention.

Both compute in fp32 with the row maximum subtracted; a row that is masked entirely
(every score -inf) gives probabilities 0, not NaN.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics.wide import work

__all__ = ["softmax", "attention_probs", "causal_bias"]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum over `axis`, fp32. A row of -inf gives NaN (see attention_probs)."""
    x = work(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return e / s


def causal_bias(rows: int, cols: int, offset: int) -> np.ndarray:
    """0 where column j <= row i + offset, -inf elsewhere (fp32 [rows, cols])."""
    allowed = np.arange(cols)[None, :] <= (np.arange(rows)[:, None] + offset)
    return np.where(allowed, np.float32(0), np.float32(-np.inf))


def attention_probs(s: np.ndarray, mask_bias: np.ndarray | None = None,
                    causal_offset: int | None = None) -> np.ndarray:
    """softmax(s + mask_bias + causal) over the last axis; rows masked entirely give 0.

    `mask_bias` is additive (0 / -inf or any float), broadcast to s's last two axes;
    `causal_offset` masks column j > row i + offset (None: no causal mask)."""
    rows, cols = s.shape[-2], s.shape[-1]
    bias = np.zeros((rows, cols), np.float32)
    if mask_bias is not None:
        bias = bias + mask_bias
    if causal_offset is not None:
        bias = bias + causal_bias(rows, cols, causal_offset)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        p = softmax(s + bias, -1)
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    p = np.where(dead, np.float32(0), p)
    return np.nan_to_num(p, nan=0.0)
