"""Block floats BFP8_B / BFP4_B against an independent float64 formula: round trip, the
shared exponent of each 16-element block, rounding and saturation, and bytes."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.numerics.block_float import (
    BFP4_B,
    BFP8_B,
    block_float,
    dequantize,
    nbytes,
    quantize,
    round_trip,
)


def _reference(x: np.ndarray, mbits: int) -> np.ndarray:
    """float64: E = floor(log2 max|x|) per block, step 2^(E - (mbits - 1)), round half to
    even, saturate at 2^mbits - 1."""
    b = x.astype(np.float64).reshape(*x.shape[:-1], -1, 16)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    e = np.floor(np.log2(np.where(amax > 0, amax, 1.0)))
    step = 2.0 ** (e - (mbits - 1))
    q = np.minimum(np.round(np.abs(b) / step), 2**mbits - 1)
    return (np.sign(b) * q * step).reshape(x.shape)


@pytest.mark.parametrize("fmt", [BFP8_B, BFP4_B])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_equals_the_float64_formula(fmt, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((8, 64)) * rng.uniform(1e-3, 1e3, (8, 1))).astype(np.float32)
    x[3, 16:32] = 0.0  # a zero block
    np.testing.assert_array_equal(round_trip(x, fmt), _reference(x, fmt.mantissa_bits))


def test_shared_exponent_is_the_block_maximum():
    x = np.zeros((1, 32), np.float32)
    x[0, 3], x[0, 20] = 5.0, -0.75   # 5.0 = 1.25 * 2^2, 0.75 = 1.5 * 2^-1
    exps, codes = quantize(x, "bfp8_b")
    assert exps.tolist() == [[127 + 2, 127 - 1]]
    assert codes[0, 3] == round(5.0 / 2 ** (2 - 6))             # 80, sign 0
    assert codes[0, 20] == 0x80 | round(0.75 / 2 ** (-1 - 6))   # 96 with the sign bit


def test_small_elements_lose_bits_to_the_block_maximum():
    x = np.array([[1.0, 1.0 / 64, 1.0 / 256] + [0.0] * 13], np.float32)
    y = round_trip(x, "bfp8_b")
    assert y[0, 1] == pytest.approx(1.0 / 64) and y[0, 2] == 0.0   # below 2^-6 flushes
    y4 = round_trip(x, "bfp4_b")
    assert y4[0, 1] == 0.0                                        # below 2^-2 half-step


def test_ties_round_to_even_and_the_top_saturates():
    # bfp4_b, block max 1.0 (E = 0): step 0.25; 0.375 = 1.5 steps -> 2 steps, 0.125 -> 0
    x = np.array([[1.0, 0.375, 0.125, 1.9375] + [0.0] * 12], np.float32)
    y = round_trip(x, "bfp4_b")
    assert y[0, :3].tolist() == [1.0, 0.5, 0.0]
    assert y[0, 3] == pytest.approx(1.75)   # 7.75 steps rounds to 8: saturates at 7


def test_bytes_per_tile_and_tensor():
    assert BFP8_B.tile_bytes() == 1024 + 64 and BFP4_B.tile_bytes() == 512 + 64
    assert BFP8_B.bytes_per_element == pytest.approx(1.0625)
    assert BFP4_B.bytes_per_element == pytest.approx(0.5625)
    assert nbytes((4096, 4096), "bfp8_b") == 4096 * 4096 * 17 // 16
    exps, codes = quantize(np.ones((32, 32), np.float32), "bfp4_b")
    assert exps.size + codes.size * BFP4_B.element_bits // 8 == BFP4_B.tile_bytes()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="Inf or NaN"):
        quantize(np.array([np.nan] * 16, np.float32), "bfp8_b")
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize(np.ones((2, 20), np.float32), "bfp8_b")
    with pytest.raises(ValueError, match="unknown block-float"):
        block_float("bfp3")
    exps, codes = quantize(np.ones((1, 16), np.float32), "bfloat8_b")
    assert dequantize(exps, codes, "bfp8") .tolist() == [[1.0] * 16]


@pytest.mark.parametrize("fmt", [BFP8_B, BFP4_B])
def test_memory_bytes_decode_to_the_float64_formula(fmt):
    """The memory encoding (an exponent byte and the codes per block) is the format's
    bytes, and decodes to the float64 rounding of the values."""
    from kernbench.numerics.block_float import block_bytes, decode, encode

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 48)) * rng.uniform(1e-2, 1e2, (6, 1))).astype(np.float32)
    x[2, :16] = 0.0
    data = encode(x, fmt)
    assert data.dtype == np.uint8 and data.size == nbytes(x.shape, fmt)
    assert block_bytes(fmt) == {8: 17, 4: 9}[fmt.element_bits]
    np.testing.assert_array_equal(decode(data, fmt).reshape(x.shape),
                                  _reference(x, fmt.mantissa_bits))
    # one block's bytes: its exponent first (the max |x| of the block's float32 exponent)
    first = data[:block_bytes(fmt)]
    assert first[0] == (x[0, :16].view(np.uint32) >> 23 & 0xFF).max()


@pytest.mark.parametrize("fmt", [BFP8_B, BFP4_B])
def test_round_rows_pads_a_partial_block_with_zeros(fmt):
    from kernbench.numerics.block_float import round_rows

    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    padded = np.concatenate([x, np.zeros((3, 8), np.float32)], axis=1)
    np.testing.assert_array_equal(round_rows(x, fmt),
                                  _reference(padded, fmt.mantissa_bits)[:, :40])
