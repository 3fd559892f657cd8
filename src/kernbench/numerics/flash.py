"""Attention blocked along the KV sequence with an online (flash-style) softmax, at the
TE's integer precision.

For each block of `kv_block` keys, in order:
1. scores s_j = int(Q_q · K_q,jᵀ) · (s_q · s_k · scale), exactly as the unblocked kernel;
2. `softmax_block`: x = s_j + mask bias (+ causal), running max m' = max(m, rowmax x),
   e_j = exp(x - m') (0 where masked), alpha = exp(m - m'), l' = l · alpha + Σ e_j;
3. e_j is quantized with its own per-row scale (row max / qmax) and multiplied by the
   quantized V block exactly (int32);
4. `merge_block`: o' = o · alpha + acc_j · (row scale · s_v); after the last block o / l.
Split along the keys into `kv_parts` parts (flash-decoding), each part runs this
loop over its own keys from a fresh state and keeps o unnormalized; `combine_part` then
folds the parts into the first in order: m' = max(m, m_p), a = exp(m - m'),
b = exp(m_p - m'), l' = l·a + l_p·b, o' = o·a + o_p·b, and o' / l' after the last part.
The state of a row is (m, l, alpha, 0) as fp32 [..., rows, 4]. The tile ops of the data
pass call these same functions on each block, so the compiled attention is bit-identical
to the interpreter; a single block (kv_block ≥ T) is not this path (the unblocked kernel
keeps its own semantics). Rows masked everywhere give 0, as the unblocked kernel.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics import quant as qmath
from kernbench.numerics.softmax import causal_bias

__all__ = ["STATE_WIDTH", "blocked_attention", "combine_part", "init_state", "kv_part_bounds",
           "longest_part", "merge_block", "softmax_block"]

#: fp32 values of the running state per row: m, l, alpha, (unused)
STATE_WIDTH = 4


def init_state(shape: tuple[int, ...]) -> np.ndarray:
    """The state before the first block: m = -inf, l = 0, alpha = 0 ([*shape, 4] fp32)."""
    st = np.zeros((*shape, STATE_WIDTH), np.float32)
    st[..., 0] = -np.inf
    return st


def softmax_block(s: np.ndarray, bias: np.ndarray | None, causal_offset: int | None,
                  state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One block of the online softmax: (e_j fp32 [..., rows, L], the new state).

    `bias` is the block's additive mask (broadcast to s), `causal_offset` masks column j
    of the block when j > row i + offset (None: not causal)."""
    s = np.asarray(s, np.float32)
    rows, cols = s.shape[-2], s.shape[-1]
    tot = np.zeros((rows, cols), np.float32)
    if bias is not None:
        tot = tot + np.asarray(bias, np.float32)
    if causal_offset is not None:
        tot = tot + causal_bias(rows, cols, causal_offset)
    x = s + tot
    m = state[..., 0]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m_new = np.maximum(m, np.max(x, axis=-1))
        safe = np.where(np.isneginf(m_new), np.float32(0), m_new).astype(np.float32)
        e = np.exp(x - safe[..., None]).astype(np.float32)
        alpha = np.exp(m - safe).astype(np.float32)
    e = np.nan_to_num(e, nan=0.0)
    l_new = (state[..., 1] * alpha + np.sum(e, axis=-1, dtype=np.float32)).astype(np.float32)
    new = np.stack([m_new, l_new, alpha, np.zeros_like(alpha)], axis=-1).astype(np.float32)
    return e, new


def merge_block(o: np.ndarray | None, acc: np.ndarray, row_scale: np.ndarray, sv: float,
                state: np.ndarray, last: bool) -> np.ndarray:
    """o · alpha + acc · (row_scale · s_v) (o None: the first block, taken as 0); with
    `last`, divided by l (0 where l = 0). acc int32 [..., rows, D], row_scale [..., rows, 1],
    state [..., rows, 4]."""
    part = np.asarray(acc).astype(np.float32) * (np.asarray(row_scale, np.float32)
                                                 * np.float32(sv))
    alpha = state[..., 2:3]
    y = part if o is None else (np.asarray(o, np.float32) * alpha + part)
    if last:
        ell = state[..., 1:2]
        y = np.where(ell > 0, y / np.where(ell > 0, ell, np.float32(1)), np.float32(0))
    return y.astype(np.float32)


def combine_part(o: np.ndarray, state: np.ndarray, o_p: np.ndarray, state_p: np.ndarray,
                 last: bool) -> tuple[np.ndarray, np.ndarray]:
    """Fold part p's unnormalized output and state into the running (o, state) (module
    doc): returns (o', state'); with `last`, o' is divided by l' (0 where l' = 0). The new
    state's alpha is the running output's factor a. o [..., rows, D], states [..., rows, 4]."""
    state = np.asarray(state, np.float32)
    state_p = np.asarray(state_p, np.float32)
    m, m_p = state[..., 0], state_p[..., 0]
    m_new = np.maximum(m, m_p)
    safe = np.where(np.isneginf(m_new), np.float32(0), m_new).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.exp(m - safe).astype(np.float32)
        b = np.exp(m_p - safe).astype(np.float32)
    l_new = (state[..., 1] * a + state_p[..., 1] * b).astype(np.float32)
    y = (np.asarray(o, np.float32) * a[..., None]
         + np.asarray(o_p, np.float32) * b[..., None]).astype(np.float32)
    if last:
        ell = l_new[..., None]
        y = np.where(ell > 0, y / np.where(ell > 0, ell, np.float32(1)), np.float32(0))
    new = np.stack([m_new, l_new, a, np.zeros_like(a)], axis=-1).astype(np.float32)
    return y.astype(np.float32), new


def kv_part_bounds(t_len: int, parts: int, first: int = 0) -> list[tuple[int, int]]:
    """[j0, j1) of each of `parts` key ranges: as equal as possible, the first ones one
    key longer, none empty (fewer parts when there are fewer keys). `first` > 0: the
    first range holds exactly that many keys and the others share the rest that way
    (the compiler's choice; ignored when the rest would leave a range empty)."""
    parts = max(1, min(parts, t_len))
    out, j0 = [], 0
    if parts > 1 and 0 < first < t_len and t_len - first >= parts - 1:
        out, j0 = [(0, first)], first
        t_len, parts = t_len - first, parts - 1
    base, extra = divmod(t_len, parts)
    for p in range(parts):
        j1 = j0 + base + (1 if p < extra else 0)
        out.append((j0, j1))
        j0 = j1
    return out


def longest_part(t_len: int, parts: int, first: int = 0) -> int:
    """Keys of the longest range of `kv_part_bounds(t_len, parts, first)`."""
    return max(hi - lo for lo, hi in kv_part_bounds(t_len, parts, first))


def blocked_attention(qq: np.ndarray, kq: np.ndarray, vq: np.ndarray, bias: np.ndarray | None,
                      causal_offset: int | None, *, kv_block: int, score_scale: np.float32,
                      sv: float, a_bits: int, kv_parts: int = 1,
                      kv_first: int = 0) -> np.ndarray:
    """softmax(Q·Kᵀ + masks)·V of integer Q [..., S, D], K / V [..., T, D] (heads already
    matched) block by block (module doc); `bias` additive, broadcast to [..., S, T].
    `kv_parts` > 1: the keys split into that many parts (`kv_part_bounds`), each blocked
    by `kv_block` (0: one block per part), combined in order; `kv_first`: the first
    part's keys (`kv_part_bounds`)."""
    t_len = kq.shape[-2]
    bounds = kv_part_bounds(t_len, kv_parts, kv_first)
    o = state = None
    for p, (lo, hi) in enumerate(bounds):
        st = init_state(qq.shape[:-1])
        op = None
        step = kv_block or hi - lo
        for j0 in range(lo, hi, step):
            j1 = min(hi, j0 + step)
            acc = qmath.int_matmul(qq, np.swapaxes(kq[..., j0:j1, :], -1, -2))
            s = acc.astype(np.float32) * score_scale
            bj = None if bias is None else bias[..., j0:j1]
            e, st = softmax_block(s, bj, None if causal_offset is None else causal_offset - j0,
                                  st)
            rs = qmath.row_scale(e, a_bits)
            eq = qmath.quantize_rows(e, rs, a_bits)
            pv = qmath.int_matmul(eq, vq[..., j0:j1, :])
            op = merge_block(op, pv, rs, sv, st, len(bounds) == 1 and j1 >= hi)
        assert op is not None
        if p == 0:
            o, state = op, st
        else:
            assert o is not None and state is not None
            o, state = combine_part(o, state, op, st, p == len(bounds) - 1)
    assert o is not None
    return o
