"""Block floats BFP8_B and BFP4_B (the Tenstorrent `bfloat8_b` / `bfloat4_b` formats).

Layout (tt-metal tt_metal/api/tt-metalium/constants.hpp: a bfloat8_b 32 × 32 tile is
1024 + 64 bytes, a bfloat4_b tile 512 + 64, "4x16B exponent section"): every run of
BLOCK = 16 consecutive elements along the last axis (one row of a 16 × 16 face) shares
one 8-bit exponent, the bfloat16 / float32 exponent of its largest magnitude; each element
keeps a sign bit and `mantissa_bits` magnitude bits (hidden one included, explicit), so

    value = sign · m · 2^(E − (mantissa_bits − 1)),   0 ≤ m < 2^mantissa_bits

with E the unbiased shared exponent. BFP8_B keeps 7 magnitude bits (one byte per element
with the sign), BFP4_B 3 (half a byte); bytes per element include the exponent section:
BFP8_B 1 + 1/16 = 1.0625, BFP4_B 0.5 + 1/16 = 0.5625.

Rounding is to nearest, ties to even, on the magnitude aligned to the shared exponent;
a magnitude that would round up to 2^mantissa_bits saturates at 2^mantissa_bits − 1.
The arithmetic works on the float32 bit pattern (integer shifts), the way a packer does;
tests/numerics check it against a float64 formula. A block of zeros stores exponent 0.
A non-finite input is refused (ValueError): the format has no Inf or NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 16  # elements sharing one exponent: a row of a 16 x 16 face
TILE = 32   # tt-metal's tile edge


@dataclass(frozen=True, slots=True)
class BlockFloat:
    """One block-float format: magnitude bits per element (hidden one included)."""

    name: str
    mantissa_bits: int

    @property
    def element_bits(self) -> int:
        """Bits an element takes in memory: sign + magnitude."""
        return 1 + self.mantissa_bits

    @property
    def bytes_per_element(self) -> float:
        """Bytes per element, the shared exponent's share (1 byte per BLOCK) included."""
        return self.element_bits / 8 + 1 / BLOCK

    def tile_bytes(self, rows: int = TILE, cols: int = TILE) -> int:
        """Bytes of a rows × cols tile: element bits plus one exponent byte per block."""
        n = rows * cols
        return n * self.element_bits // 8 + n // BLOCK


BFP8_B = BlockFloat("bfp8_b", 7)
BFP4_B = BlockFloat("bfp4_b", 3)
FORMATS: dict[str, BlockFloat] = {"bfp8_b": BFP8_B, "bfp4_b": BFP4_B}
_ALIASES = {"bfloat8_b": "bfp8_b", "bfp8": "bfp8_b", "bfloat4_b": "bfp4_b", "bfp4": "bfp4_b"}


def block_float(name: str | BlockFloat) -> BlockFloat:
    """The format named `name` (bfp8_b, bfloat8_b, bfp8, ...); ValueError if unknown."""
    if isinstance(name, BlockFloat):
        return name
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in FORMATS:
        raise ValueError(f"unknown block-float format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[key]


def _blocks(x: np.ndarray) -> np.ndarray:
    if x.ndim == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"last axis {x.shape[-1:]} is not a multiple of {BLOCK}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)


def quantize(x: np.ndarray, fmt: str | BlockFloat) -> tuple[np.ndarray, np.ndarray]:
    """Encode `x` (last axis a multiple of 16): (shared biased exponents uint8 of shape
    [..., n/16], sign-magnitude codes uint8 of x's shape: bit 7 sign, low bits m)."""
    f = block_float(fmt)
    v = np.asarray(x, dtype=np.float32)
    if not np.isfinite(v).all():
        raise ValueError("block floats have no Inf or NaN")
    bits = _blocks(v).view(np.uint32)
    sign = (bits >> 31).astype(np.uint8)
    exp = ((bits >> 23) & 0xFF).astype(np.int64)
    man = (bits & 0x7FFFFF).astype(np.int64) | np.where(exp > 0, 1 << 23, 0)
    exp = np.maximum(exp, 1)  # subnormals share the smallest normal exponent's scale
    shared = np.where(man.any(axis=-1), exp.max(axis=-1), 0)
    # aligned magnitude = man · 2^(exp − shared) / 2^(24 − mantissa_bits), rounded to even
    shift = (shared[..., None] - exp) + (24 - f.mantissa_bits)
    shift = np.minimum(shift, 62)
    q = man >> shift
    rem = man - (q << shift)
    half = np.int64(1) << (shift - 1)
    up = (rem > half) | ((rem == half) & (q & 1 == 1))
    q = np.minimum(q + up, (1 << f.mantissa_bits) - 1).astype(np.uint8)
    codes = np.where(q == 0, 0, (sign << 7) | q).astype(np.uint8)
    return shared.astype(np.uint8), codes.reshape(v.shape)


def dequantize(exponents: np.ndarray, codes: np.ndarray, fmt: str | BlockFloat) -> np.ndarray:
    """Decode to float32: sign · m · 2^(E − 127 − (mantissa_bits − 1)) per element."""
    f = block_float(fmt)
    c = _blocks(np.asarray(codes, dtype=np.uint8))
    m = (c & ((1 << f.mantissa_bits) - 1)).astype(np.float64)
    s = np.where(c >> 7, -1.0, 1.0)
    e = np.asarray(exponents, dtype=np.int64)[..., None] - 127 - (f.mantissa_bits - 1)
    out = s * np.ldexp(m, e)
    return out.reshape(np.asarray(codes).shape).astype(np.float32)


def round_trip(x: np.ndarray, fmt: str | BlockFloat) -> np.ndarray:
    """`x` as the format stores it (quantize then dequantize), float32."""
    return dequantize(*quantize(x, fmt), fmt)


def nbytes(shape: tuple[int, ...], fmt: str | BlockFloat) -> int:
    """Bytes a tensor of `shape` takes in the format (last axis a multiple of 16)."""
    f = block_float(fmt)
    n = int(np.prod(shape))
    if not shape or shape[-1] % BLOCK:
        raise ValueError(f"last axis of {shape} is not a multiple of {BLOCK}")
    return n * f.element_bits // 8 + n // BLOCK


# ----------------------------------------------------------------------------- memory bytes
#
# In memory (HBM) a block-float tensor is its flat elements in blocks of BLOCK, each block
# stored as its exponent byte followed by its codes: 16 code bytes (BFP8_B) or 8 bytes of
# two 4-bit codes (BFP4_B: sign bit 3, magnitude bits 0-2; the lower element in the low
# nibble). A block is 17 or 9 bytes, `bytes_per_element` × 16, so any run of whole blocks
# is a contiguous byte range and a DMA of it moves exactly the format's bytes. (tt-metal
# keeps a tile's 64 exponent bytes ahead of its codes; the byte count is the same.)


def block_bytes(fmt: str | BlockFloat) -> int:
    """Bytes of one block in memory: the exponent and BLOCK codes."""
    f = block_float(fmt)
    return 1 + BLOCK * f.element_bits // 8


def _nibbles(codes: np.ndarray, f: BlockFloat) -> np.ndarray:
    """BFP4_B's sign-magnitude code (bit 7 sign, 3 magnitude bits) as a 4-bit nibble."""
    return ((codes >> 7) << 3 | (codes & ((1 << f.mantissa_bits) - 1))).astype(np.uint8)


def encode(x: np.ndarray, fmt: str | BlockFloat) -> np.ndarray:
    """The memory bytes (uint8, flat) of `x` flattened (its size a multiple of BLOCK)."""
    f = block_float(fmt)
    flat = np.asarray(x, np.float32).reshape(-1)
    if flat.size % BLOCK:
        raise ValueError(f"{flat.size} elements are not whole blocks of {BLOCK}")
    exps, codes = quantize(flat.reshape(-1, BLOCK), f)
    if f.element_bits == 8:
        body = codes
    else:
        nib = _nibbles(codes, f)
        body = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return np.concatenate([exps.reshape(-1, 1), body], axis=1).reshape(-1)


def decode(data: np.ndarray, fmt: str | BlockFloat) -> np.ndarray:
    """float32 values (flat) of memory bytes written by `encode` (whole blocks)."""
    f = block_float(fmt)
    raw = np.asarray(data, np.uint8).reshape(-1)
    bb = block_bytes(f)
    if raw.size % bb:
        raise ValueError(f"{raw.size} bytes are not whole {f.name} blocks of {bb} bytes")
    blocks = raw.reshape(-1, bb)
    exps, body = blocks[:, 0], blocks[:, 1:]
    if f.element_bits == 8:
        codes = body
    else:
        nib = np.empty((body.shape[0], BLOCK), np.uint8)
        nib[:, 0::2], nib[:, 1::2] = body & 0xF, body >> 4
        codes = ((nib >> 3) << 7 | (nib & 0x7)).astype(np.uint8)
    return dequantize(exps.reshape(-1, 1), codes, f).reshape(-1)


def round_rows(x: np.ndarray, fmt: str | BlockFloat) -> np.ndarray:
    """`x` as the format stores it, blocks along the last axis from its first element, a
    last axis that is not whole blocks padded with zeros (a zero never raises a block's
    exponent) and cut back: what a tensor stored row by row at the format holds."""
    v = np.asarray(x, np.float32)
    pad = -v.shape[-1] % BLOCK
    if pad:
        v = np.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, pad)])
    out = round_trip(v, fmt)
    return out[..., :out.shape[-1] - pad] if pad else out
