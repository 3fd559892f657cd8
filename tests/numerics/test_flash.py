"""Attention blocked along the KV sequence (numerics.flash, ADR-0704) against plain numpy
softmax attention, and the zero-point GEMM correction against numpy integer algebra."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.numerics import quant as qmath
from kernbench.numerics.attention import attention
from kernbench.numerics.flash import init_state, merge_block, softmax_block

# float results: `make test` runs these again at numpy's baseline SIMD level
pytestmark = pytest.mark.float_cpu


def _numpy_attention(q, k, v, bias, rep):  # noqa: ANN001
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) * 0.25 + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("blk", [1, 7, 32, 99])
def test_blocked_attention_close_to_numpy(blk):
    rng = np.random.default_rng(blk)
    q = rng.standard_normal((1, 4, 3, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 100, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, 100, 16)).astype(np.float32)
    mask = np.zeros((1, 1, 3, 100), np.float32)
    mask[..., 90:] = -np.inf
    ref = _numpy_attention(q, k, v, mask, 2)
    y = attention(q, k, v, mask, num_heads=4, num_kv_heads=2, scale=0.25, a_bits=8,
                  kv_bits=8, kv_block=blk)
    cos = float((y * ref).sum() / np.linalg.norm(y) / np.linalg.norm(ref))
    assert cos > 0.9995 and np.abs(y - ref).max() < 0.02


def test_online_softmax_state_matches_full_softmax():
    rng = np.random.default_rng(1)
    s = rng.standard_normal((5, 40)).astype(np.float32) * 4
    st = init_state((5,))
    o = None
    v = np.eye(40, dtype=np.int32)  # P·I = P: the merged output is the probabilities
    for j0 in range(0, 40, 16):
        e, st = softmax_block(s[:, j0:j0 + 16], None, None, st)
        o = merge_block(o, (e * 1000).astype(np.int64) @ v[j0:j0 + 16],
                        np.full((5, 1), 1e-3, np.float32), 1.0, st, j0 + 16 >= 40)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(o, p, atol=2e-3)
    np.testing.assert_allclose(st[:, 0], s.max(-1))


def test_fully_masked_rows_give_zero():
    s = np.zeros((2, 8), np.float32)
    bias = np.full((2, 8), -np.inf, np.float32)
    e, st = softmax_block(s, bias, None, init_state((2,)))
    assert not e.any() and np.isneginf(st[:, 0]).all()
    o = merge_block(None, np.zeros((2, 4), np.int32), np.ones((2, 1), np.float32), 1.0, st,
                    True)
    assert not o.any() and np.isfinite(o).all()


def test_zero_point_column_correction_is_exact():
    """Σ_k (x_q - z_x)·w_q = X_q·W_q - z_x·colsum(W_q), and a uint8 activation shifted to
    int8 keeps (x_q - z_x): the identities the compiled GEMM relies on."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 32)).astype(np.float32)
    w = rng.integers(-127, 128, (32, 5)).astype(np.int8)
    s, z = np.float32(0.02), 131
    xu = qmath.quantize(x, s, z, 8, signed=False)
    xs = qmath.quantize(x, s, z - 128, 8, signed=True)
    np.testing.assert_array_equal(xu.astype(np.int32) - 128, xs.astype(np.int32))
    ref = qmath.int_matmul(xu, w, z, 0)
    corr = -(z - 128) * w.astype(np.int64).sum(0)
    np.testing.assert_array_equal(qmath.int_matmul(xs, w) + corr, ref)
