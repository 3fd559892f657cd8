"""Rotary position embedding (half style, as Llama / ONNX RotaryEmbedding non-interleaved)."""

from __future__ import annotations

import numpy as np

from kernbench.numerics.wide import work

__all__ = ["rope", "rope_interleaved"]


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x·cos + rotate_half(x)·sin with rotate_half(x) = [-x2, x1] over the last axis
    (x1, x2 its halves); cos / sin broadcast to x (full width: each angle twice).
    Computed in fp32, returned in x's dtype."""
    xf = work(x)
    h = xf.shape[-1] // 2
    rot = np.concatenate([-xf[..., h:], xf[..., :h]], axis=-1)
    return (xf * work(cos) + rot * work(sin)).astype(x.dtype)


def rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """GPT-J style: each pair (x[2i], x[2i+1]) of the last axis rotated by angle i;
    cos / sin hold one value per pair (last axis = x's / 2). fp32, x's dtype out."""
    xf = work(x)
    a, b = xf[..., 0::2], xf[..., 1::2]
    c, s = work(cos), work(sin)
    y = np.empty_like(xf)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = b * c + a * s
    return y.astype(x.dtype)
