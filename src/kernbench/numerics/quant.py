"""Quantized primitive math, shared by the reference interpreter and the simulator's
data pass (so both compute bit-identical results).

Conventions:
- real = (q - zero_point) * scale; quantize rounds half to even (np.rint, as ONNX) and
  saturates to the integer range of the bit width.
- Weights: symmetric, per output channel (or per tensor), scale = max|w| / qmax.
- Activations: symmetric per tensor; the scale is static when the IR carries one
  (imported QDQ), else dynamic: max|x| / qmax of the tensor being quantized.
- Integer GEMM: int8 (or int4 / uint8 / int16) operands, zero points subtracted,
  accumulated exactly: into int32 when the widths and K cannot overflow it, else into
  int64 (`int_matmul`, `accumulator_bits`).
- Requantization: int32 accumulator * (s_a * s_w / s_out) rounded half to even, + zero
  point, saturated (`requantize`).
- int4 values are held unpacked in int8 containers; `pack_int4` / `unpack_int4` convert
  to / from the ONNX packed layout (two per byte, low nibble first).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import ml_dtypes
import numpy as np

from kernbench.numerics import block_float

__all__ = [
    "qrange",
    "storage_dtype",
    "symmetric_scale",
    "calibrated_scale",
    "CALIB_MANTISSA_BITS",
    "quantize",
    "dequantize",
    "fake_quant",
    "quantize_weight",
    "shared_weights",
    "int_matmul",
    "accumulator_bits",
    "row_scale",
    "quantize_rows",
    "requantize",
    "pack_int4",
    "pack_bits",
    "unpack_bits",
    "unpack_int4",
    "expand_blocked",
    "round_to_float",
    "quantize_activation",
    "dynamic_quantize_linear",
    "dynamic_qparams",
    "dequantize_int32",
]


def qrange(bits: int, signed: bool = True) -> tuple[int, int]:
    """Integer range of a `bits`-wide integer. Symmetric quantization uses
    [-(2^(b-1)-1), 2^(b-1)-1] for the scale but saturates to the full range."""
    if signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def storage_dtype(bits: int, signed: bool = True) -> np.dtype:
    """numpy container for integers of `bits` bits (int4 lives in int8)."""
    if bits <= 8:
        return np.dtype(np.int8 if signed else np.uint8)
    if bits <= 16:
        return np.dtype(np.int16 if signed else np.uint16)
    return np.dtype(np.int32 if signed else np.uint32)


def _qmax_sym(bits: int) -> int:
    return (1 << (bits - 1)) - 1


def symmetric_scale(x: np.ndarray, bits: int, axis: int | None = None) -> np.ndarray:
    """max|x| / qmax, per tensor (axis None, returns a 0-d float32 array) or per slice
    along `axis` (returns shape [x.shape[axis]]). Zero ranges get scale 1."""
    x = np.asarray(x, dtype=np.float32)
    if axis is None:
        amax = np.float32(_abs_max(x))
    else:
        axis = axis % x.ndim
        red = tuple(i for i in range(x.ndim) if i != axis)
        # max|x| from the two ends (no array of absolute values): the same value, NaN
        # included
        amax = np.maximum(-np.min(x, axis=red), np.max(x, axis=red)) if red else np.abs(x)
    amax = np.asarray(amax, dtype=np.float32)
    scale = (amax / np.float32(_qmax_sym(bits))).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


#: significant bits of a calibrated activation scale (`calibrated_scale`): a scale moves
#: only when its float64 range crosses a step of 2^-16 to 2^-15 of itself, which the
#: float64 rounding differences between CPUs (~1e-16 relative) almost never do
#: (docs/verification.md, "Calibration on any CPU")
CALIB_MANTISSA_BITS = 16


def calibrated_scale(x: np.ndarray, bits: int) -> np.ndarray:
    """The static per-tensor scale calibrated from the values `x`: max|x| / qmax in
    float64, rounded up to CALIB_MANTISSA_BITS significant bits (so exact in float32, and
    never below max|x| / qmax: the calibrated maximum does not saturate). A 0-d float32
    array; a zero or NaN range gives 1, an infinite one inf (as `symmetric_scale`)."""
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        amax = float(np.max(np.abs(a))) if a.size else 0.0
    s = amax / _qmax_sym(bits)
    if not s > 0:
        return np.asarray(1.0, np.float32)
    if math.isinf(s):
        return np.asarray(np.inf, np.float32)
    m, e = math.frexp(s)  # s = m · 2^e, 0.5 <= m < 1
    snapped = math.ldexp(math.ceil(math.ldexp(m, CALIB_MANTISSA_BITS)),
                         e - CALIB_MANTISSA_BITS)
    return np.asarray(snapped, np.float32)


def expand_blocked(p: np.ndarray, shape: tuple[int, ...], axis: int | None,
                   block_size: int = 0) -> np.ndarray:  # fmt: skip
    """Broadcast a scale / zero point to `shape`: per tensor (scalar), per axis (1-D of
    length shape[axis]) or blocked (same rank, shape[axis] = ceil(n / block_size))."""
    p = np.asarray(p)
    ndim = len(shape)
    if p.ndim == 0 or p.size == 1 and axis is None:
        return p.reshape(())
    if axis is None:
        raise ValueError("non-scalar quantization parameter needs an axis")
    axis = axis % ndim
    if block_size and block_size > 0:
        rep = np.repeat(p, block_size, axis=axis)
        idx = [slice(None)] * ndim
        idx[axis] = slice(0, shape[axis])
        return rep[tuple(idx)]
    new = [1] * ndim
    new[axis] = shape[axis]
    return p.reshape(new)


def quantize(x: np.ndarray, scale, zero_point=0, bits: int = 8, signed: bool = True,
             axis: int | None = None, block_size: int = 0) -> np.ndarray:  # fmt: skip
    """q = saturate(rint(x / scale) + zero_point), in the container of `bits`.

    NaN quantizes to the zero point and ±Inf saturates, on every CPU (a NaN, an infinity or
    a float past int64's range cast to an integer is undefined: x86 and ARM give different
    values, and numpy warns); so does a finite value of any size.
    Callers that take user tensors warn about NaN/Inf where they read them."""
    x = np.asarray(x, dtype=np.float32)
    s = expand_blocked(np.asarray(scale, dtype=np.float32), x.shape, axis, block_size)
    lo, hi = qrange(bits, signed)
    if x.size and np.ndim(zero_point) == 0 and zero_point == 0:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            r = np.divide(x, s)
        np.rint(r, out=r)
        m = r.max()
        if m == m:  # no NaN: the integral floats clipped to the range, ±Inf included
            return np.clip(r, lo, hi, out=r).astype(storage_dtype(bits, signed))
    zp = expand_blocked(np.asarray(zero_point), x.shape, axis, block_size).astype(np.int64)
    if x.size:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            r = np.rint(x / s)
        if not np.isfinite(r).all():
            r = np.nan_to_num(r, nan=0.0, posinf=float(hi) - float(lo),
                              neginf=float(lo) - float(hi))
        # a float past int64's range has no defined cast: saturate it first
        q = np.clip(r, -(2.0**62), 2.0**62).astype(np.int64)
    else:
        q = np.zeros(x.shape, np.int64)
    q = np.clip(q + zp, lo, hi)
    return q.astype(storage_dtype(bits, signed))


def dequantize(q: np.ndarray, scale, zero_point=0, axis: int | None = None,
               block_size: int = 0) -> np.ndarray:  # fmt: skip
    """real = (q - zero_point) * scale, float32."""
    q = np.asarray(q)
    s = expand_blocked(np.asarray(scale, dtype=np.float32), q.shape, axis, block_size)
    zp = expand_blocked(np.asarray(zero_point), q.shape, axis, block_size)
    return ((q.astype(np.int32) - zp.astype(np.int32)).astype(np.float32) * s).astype(
        np.float32
    )


def fake_quant(x: np.ndarray, bits: int, scale=None, zero_point=0, signed: bool = True,
               axis: int | None = None) -> np.ndarray:  # fmt: skip
    """dequantize(quantize(x)); symmetric dynamic scale when `scale` is None."""
    if scale is None:
        scale = symmetric_scale(x, bits, axis)
    q = quantize(x, scale, zero_point, bits, signed, axis)
    return dequantize(q, scale, zero_point, axis)


def quantize_weight(w: np.ndarray, bits: int, axis: int | None = -1):
    """Symmetric weight quantization: returns (q, scale). For a GEMM weight w[K, N] the
    default axis -1 gives one scale per output channel. Inside `shared_weights` a
    read-only array is quantized once per (bits, axis) and its results are read-only."""
    memo = _SHARED.get()
    if memo is None or not isinstance(w, np.ndarray) or w.flags.writeable:
        return _quantize_weight(w, bits, axis)
    key = (id(w), bits, axis)
    hit = memo.get(key)
    if hit is None:
        q, scale = _quantize_weight(w, bits, axis)
        q.flags.writeable = False
        scale.flags.writeable = False
        hit = memo[key] = (w, q, scale)  # w held: its id is not reused while it is kept
    return hit[1], hit[2]


def _quantize_weight(w: np.ndarray, bits: int, axis: int | None):
    scale = symmetric_scale(w, bits, axis)
    return quantize(w, scale, 0, bits, True, axis), scale


_SHARED: ContextVar[dict | None] = ContextVar("kernbench_shared_weights", default=None)


@contextmanager
def shared_weights() -> Iterator[None]:
    """Quantize each read-only weight once per (bits, axis) while the context is open
    (`quantize_weight`): a compile's calibration run and its lowering quantize the same
    weights. A read-only array is one nothing changes in place while the context is open."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def row_scale(x: np.ndarray, bits: int) -> np.ndarray:
    """Per-row symmetric scale max|x| / qmax over the last axis (keepdims), float32;
    all-zero rows get scale 1. Used for attention probabilities, whose rows span very
    different ranges (≈ 1/T for long, flat rows)."""
    amax = np.max(np.abs(np.asarray(x, np.float32)), axis=-1, keepdims=True)
    s = (amax / np.float32(_qmax_sym(bits))).astype(np.float32)
    return np.where(s > 0, s, np.float32(1.0)).astype(np.float32)


def quantize_rows(x: np.ndarray, scale: np.ndarray, bits: int) -> np.ndarray:
    """q = saturate(rint(x / scale)) with a per-row scale (shape [..., 1])."""
    lo, hi = qrange(bits, True)
    q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    return np.clip(q, lo, hi).astype(storage_dtype(bits, True))


def int_matmul(a_q: np.ndarray, b_q: np.ndarray, a_zp=0, b_zp=0) -> np.ndarray:
    """Exact integer matmul: (a_q - a_zp) @ (b_q - b_zp), never wrapped.

    The result is int32 when `accumulator_bits` of the operands' containers and K is 32
    (every 8-bit case that fits a TE tile), else int64: 16-bit integer products summed
    over K do not fit an int32 accumulator, and the hardware accumulates them in a wide
    (48-bit) accumulator that int64 holds exactly. Computed with float BLAS while every
    partial sum is an integer a float holds exactly: float32 over K slices whose partial
    sums stay below 2^24 (`_F32_EXACT`), the slices summed in float64; float64 when a slice
    would be too short to pay; int64 when a sum can reach 2^53. Every partial sum of any
    summation order is bounded by max|a| · max|b| · K, so the result does not depend on
    how BLAS orders or fuses its additions. Zero points broadcast like ONNX MatMulInteger
    (a_zp per row of a, b_zp per column of b)."""
    a_q, b_q = np.asarray(a_q), np.asarray(b_q)
    k = a_q.shape[-1]
    wide = accumulator_bits(a_q.dtype, b_q.dtype, k) > 32
    za, zb = _zp_rows(a_zp, a_q.shape), _zp_cols(b_zp, b_q.shape)
    if _range_bound(a_q.dtype, za) * _range_bound(b_q.dtype, zb) * k <= _F32_EXACT:
        # bounded by the containers' ranges alone (8-bit operands, short K): float32
        # straight from the integers, no pass over the values to bound them
        acc = np.matmul(_centered(a_q, za), _centered(b_q, zb))
        return acc.astype(np.int64) if wide else acc.astype(np.int32)
    if _f32_holds(a_q.dtype, za) and _f32_holds(b_q.dtype, zb):
        # integers below 2^24 after their zero points: float32 holds them exactly
        a, b = _centered(a_q, za), _centered(b_q, zb)
    else:
        a = a_q.astype(np.float64) - za
        b = b_q.astype(np.float64) - zb
    prod = _abs_max(a) * _abs_max(b)
    if prod * k >= 2.0**53:
        acc = np.matmul(a.astype(np.int64), b.astype(np.int64))
    else:
        step = int(_F32_EXACT // prod) if prod else k
        if step >= k or (step >= _F32_MIN_SLICE and b.ndim >= 2):
            acc = _f32_slices(a.astype(np.float32, copy=False),
                              b.astype(np.float32, copy=False), k, step)
        else:
            acc = np.matmul(a.astype(np.float64, copy=False), b.astype(np.float64, copy=False))
    return acc.astype(np.int64) if wide else acc.astype(np.int64).astype(np.int32)


def _centered(q: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """q - zp in float32 (the caller knows float32 holds every value exactly); no
    subtraction when every zero point is 0."""
    f = q.astype(np.float32)
    return f - zp.astype(np.float32) if zp.any() else f


def _abs_max(a: np.ndarray) -> float:
    """max |a| (0 when empty), from the two ends: no array of absolute values."""
    if not a.size:
        return 0.0
    return float(max(-np.min(a), np.max(a)))


def _f32_holds(dtype: np.dtype, zp: np.ndarray) -> bool:
    """Does float32 hold every q - zp of the integer container `dtype` exactly?"""
    return _range_bound(dtype, zp) < _F32_EXACT and not np.any(zp % 1)


def _range_bound(dtype: np.dtype, zp: np.ndarray) -> float:
    """max |q - zp| over every value of the integer container `dtype` (inf for a float
    container: its values bound nothing)."""
    if dtype.kind not in "iu":
        return float("inf")
    info = np.iinfo(dtype)
    return float(max(np.max(np.abs(info.min - zp)), np.max(np.abs(info.max - zp))))


#: float32 holds every integer up to 2^24 exactly
_F32_EXACT = float(2**24 - 1)
#: K slices shorter than this cost more in passes over the output than float32 saves
_F32_MIN_SLICE = 256


def _f32_slices(a: np.ndarray, b: np.ndarray, k: int, step: int) -> np.ndarray:
    """a @ b over K in slices of at most `step` (each exact in float32), summed in
    float64 (exact: the caller bounds the whole sum below 2^53)."""
    if step >= k:
        return np.matmul(a, b)
    acc = np.matmul(a[..., :step], b[..., :step, :]).astype(np.float64)
    for k0 in range(step, k, step):
        acc += np.matmul(a[..., k0:k0 + step], b[..., k0:k0 + step, :])
    return acc


def accumulator_bits(a_dtype, b_dtype, k: int) -> int:  # noqa: ANN001
    """Width of the integer accumulator of a K-long dot product of `a_dtype` × `b_dtype`
    integers (containers: int8 holds int4 / int2): 32 when K · max|a| · max|b| (zero
    points included: |q - zp| < 2^bits) stays below 2^31, else 64."""
    ba, bb = np.dtype(a_dtype).itemsize * 8, np.dtype(b_dtype).itemsize * 8
    return 32 if (1 << (ba + bb)) * max(int(k), 1) < (1 << 31) else 64


def _zp_rows(zp, shape) -> np.ndarray:
    zp = np.asarray(zp, dtype=np.float64)
    if zp.size == 1:
        return zp.reshape(())
    return zp.reshape(zp.shape + (1,))  # one zero point per row of a[..., M, K]


def _zp_cols(zp, shape) -> np.ndarray:
    zp = np.asarray(zp, dtype=np.float64)
    if zp.size == 1:
        return zp.reshape(())
    return zp  # one zero point per column of b[..., K, N]


def requantize(acc: np.ndarray, multiplier, zero_point=0, bits: int = 8,
               signed: bool = True) -> np.ndarray:  # fmt: skip
    """int32 accumulator -> `bits` integers: saturate(rint(acc * multiplier) + zp).

    `multiplier` = s_a * s_w / s_out (float32, broadcast per output channel). Computed in
    float32 like onnxruntime's QLinearMatMul."""
    m = np.asarray(multiplier, dtype=np.float32)
    y = np.rint(np.asarray(acc).astype(np.float32) * m).astype(np.int64)
    lo, hi = qrange(bits, signed)
    y = np.clip(y + np.asarray(zero_point).astype(np.int64), lo, hi)
    return y.astype(storage_dtype(bits, signed))


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack int4/uint4 values (held in int8/uint8) two per byte, low nibble first (ONNX
    layout). Odd lengths are padded with a zero nibble. Returns flat uint8."""
    flat = np.asarray(q).reshape(-1).astype(np.int16) & 0xF
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.int16)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def pack_bits(q: np.ndarray, nbits: int) -> np.ndarray:
    """Pack `nbits`-wide integers (4 or 2; held in int8 / uint8) 8 // nbits per byte,
    lowest bits first (int4: `pack_int4`, the ONNX layout; int2 likewise, four a byte).
    A short last byte is padded with zeros. Returns flat uint8."""
    if nbits == 4:
        return pack_int4(q)
    per = 8 // nbits
    flat = np.asarray(q).reshape(-1).astype(np.int16) & ((1 << nbits) - 1)
    flat = np.concatenate([flat, np.zeros((-flat.size) % per, np.int16)])
    out = np.zeros(flat.size // per, np.int16)
    for i in range(per):
        out |= flat[i::per] << (i * nbits)
    return out.astype(np.uint8)


def unpack_bits(packed: np.ndarray, count: int, nbits: int, signed: bool = True) -> np.ndarray:
    """Inverse of `pack_bits`: `count` values in int8 (signed) or uint8."""
    if nbits == 4:
        return unpack_int4(packed, count, signed)
    per = 8 // nbits
    p = np.asarray(packed, dtype=np.uint8).reshape(-1).astype(np.int16)
    out = np.empty(p.size * per, np.int16)
    for i in range(per):
        out[i::per] = (p >> (i * nbits)) & ((1 << nbits) - 1)
    out = out[:count]
    if signed:
        return np.where(out >= 1 << (nbits - 1), out - (1 << nbits), out).astype(np.int8)
    return out.astype(np.uint8)


def unpack_int4(packed: np.ndarray, count: int, signed: bool = True) -> np.ndarray:
    """Inverse of `pack_int4`: returns `count` values in int8 (signed) or uint8."""
    p = np.asarray(packed, dtype=np.uint8).reshape(-1)
    lo = (p & 0xF).astype(np.int16)
    hi = (p >> 4).astype(np.int16)
    out = np.empty(p.size * 2, np.int16)
    out[0::2] = lo
    out[1::2] = hi
    out = out[:count]
    if signed:
        out = np.where(out >= 8, out - 16, out)
        return out.astype(np.int8)
    return out.astype(np.uint8)


def round_to_float(x: np.ndarray, mode: str | None) -> np.ndarray:
    """Round float32 values to fp16 / bf16 precision, or to a block float (bfp8_b /
    bfp4_b: blocks of 16 along the last axis, `block_float.round_rows`); float32."""
    if mode is None:
        return x
    if mode in block_float.FORMATS:
        return block_float.round_rows(x, mode)
    if mode == "fp16":
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
    if mode == "bf16":
        return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    raise ValueError(f"unknown float mode {mode!r}")


def quantize_activation(x: np.ndarray, bits: int, static: dict | None = None):
    """An activation entering a TE at `bits`: returns (q, scale, zero_point).

    `static` = {"scale", "zero_point", "signed"} (a calibrated or imported per-tensor
    quantization at these bits) is used as is; None quantizes symmetrically with the
    dynamic scale max|x| / qmax."""
    if static is not None:
        scale, zp = static["scale"], static["zero_point"]
        return quantize(x, scale, zp, bits, bool(static["signed"])), scale, zp
    scale = symmetric_scale(x, bits)
    return quantize(x, scale, 0, bits, True), scale, 0


def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX DynamicQuantizeLinear: uint8 with the asymmetric range [min(x, 0), max(x, 0)];
    returns (q, scale, zero_point)."""
    x = np.asarray(x, np.float32)
    lo = float(np.min(x)) if x.size else 0.0
    hi = float(np.max(x)) if x.size else 0.0
    scale, zp = dynamic_qparams(lo, hi)
    q = np.zeros(x.shape, np.uint8) if scale == 0 else quantize(x, scale, zp, 8, False)
    return q, scale, zp


def dynamic_qparams(x_min: float, x_max: float) -> tuple[np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear's (scale fp32, zero point uint8) of a tensor whose minimum
    and maximum are `x_min`, `x_max` (the range is widened to include 0). Only the two
    extremes matter, so a tiled quantization combines per-tile minima and maxima and gets
    the very values of the whole-tensor computation."""
    lo, hi = np.float32(min(0.0, float(x_min))), np.float32(max(0.0, float(x_max)))
    # fp32 arithmetic, as the ONNX reference and onnxruntime (float64 was 1 ulp off)
    scale = (hi - lo) / np.float32(255) if hi > lo else np.float32(0.0)
    if scale == 0:
        zp = np.uint8(0)
    else:
        zp = np.uint8(np.clip(np.rint(np.float32(0 - lo) / scale), 0, 255))
    return np.asarray(scale, np.float32), np.asarray(zp, np.uint8)


def dequantize_int32(x: np.ndarray, scale, zero_point) -> np.ndarray:
    """DequantizeLinear of int32 data (a bias): (x - zp) · scale in float64, then fp32."""
    return ((x.astype(np.int64) - np.asarray(zero_point).astype(np.int64))
            * np.asarray(scale).astype(np.float64)).astype(np.float32)
