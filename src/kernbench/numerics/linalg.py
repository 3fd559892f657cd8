"""Matrix products and convolution, with the TE's quantization.

Precision parameters are plain values: an `int` bit width quantizes (exact integer
products, int32 accumulators, dequantized in the epilogue), "fp16" / "bf16" round the
operand to that float, "bfp8_b" / "bfp4_b" to that block float (blocks of 16 along
the last axis: a GEMM weight [K, N] along N), None computes in fp32.

Quantization inputs:
- `x_static`: a static per-tensor activation quantization {"scale", "zero_point",
  "signed"} at the activation bits (calibrated or imported); None means dynamic
  symmetric (max|x| / qmax of the tensor).
- `w_quant`: an imported quantized weight {"q", "scale", "zero_point", "axis",
  "block_size"} (integer data, not the real values); None means the weight is real and
  is quantized symmetrically per output channel (`per_channel`) or per tensor.
"""

from __future__ import annotations

import numpy as np

from kernbench.numerics import quant as qmath
from kernbench.numerics.errors import KernelError
from kernbench.numerics.wide import work, work_dtype

__all__ = ["te_matmul", "gemm", "qkv_proj", "matmul", "conv", "conv_nd", "conv2d_nhwc",
           "matmul_integer", "qlinear_matmul", "qlinear_multiplier", "qlinear_conv",
           "conv_integer"]

Bits = int | str | None


def _float_mode(bits: Bits) -> str | None:
    return bits if bits in ("fp16", "bf16", "bfp8_b", "bfp4_b") else None


def _weight_q(w: np.ndarray, bits: int, axis: int, w_quant: dict | None, per_channel: bool):
    """(q, scale, zero_point, axis, block) of a weight at `bits`."""
    if w_quant is not None:
        return (w_quant["q"], w_quant["scale"], w_quant["zero_point"], w_quant["axis"],
                w_quant["block_size"])
    ax = axis if per_channel else None
    qv, s = qmath.quantize_weight(w, bits, ax)
    return qv, s, 0, (axis % w.ndim if per_channel else None), 0


def _int_matmul_dequant(xq, sx, zx, wq, sw, zw, axis, block) -> np.ndarray:  # noqa: ANN001
    """Integer GEMM of quantized operands, dequantized (per block along K when blocked)."""
    sw = np.asarray(sw, np.float32)
    zw = np.asarray(zw)
    k, n = wq.shape
    if block and axis == 0:
        # blocked along K: one integer GEMM per block, scales applied per block
        y = np.zeros((xq.shape[0], n), np.float32)
        for bi, k0 in enumerate(range(0, k, block)):
            k1 = min(k, k0 + block)
            zrow = zw[bi] if zw.ndim == 2 else zw
            acc = qmath.int_matmul(xq[:, k0:k1], wq[k0:k1], zx, zrow)
            y += acc.astype(np.float32) * (np.float32(sx) * sw[bi])
        return y
    if axis is None or sw.ndim == 0:
        sw_b = sw.reshape(())
        zw_b = zw.reshape(()) if zw.size == 1 else zw
    elif axis % 2 == 1:
        sw_b, zw_b = sw.reshape(-1), (zw.reshape(-1) if zw.size > 1 else zw.reshape(()))
    else:
        raise KernelError("weight quantized along K needs block_size")
    acc = qmath.int_matmul(xq, wq, zx, zw_b)
    return acc.astype(np.float32) * (np.asarray(sx, np.float32) * sw_b)


def te_matmul(x: np.ndarray, w: np.ndarray, *, a_bits: Bits = None, w_bits: Bits = None,
              x_static: dict | None = None, w_quant: dict | None = None,
              per_channel: bool = True) -> np.ndarray:
    """x[..., K] @ w[K, N] at the TE's precision; returns fp32 [..., N]."""
    lead = x.shape[:-1]
    x2 = work(x.reshape(-1, x.shape[-1]))
    if isinstance(a_bits, int) and (isinstance(w_bits, int) or w_quant is not None):
        xq, sx, zx = qmath.quantize_activation(x2, a_bits, x_static)
        wq, sw, zw, axis, block = _weight_q(w, w_bits if isinstance(w_bits, int) else 8, -1,
                                            w_quant, per_channel)
        return _int_matmul_dequant(xq, sx, zx, wq, sw, zw, axis, block).reshape(*lead, -1)
    if isinstance(a_bits, int):
        x2 = qmath.dequantize(*qmath.quantize_activation(x2, a_bits, x_static))
    if isinstance(w_bits, int) and w_quant is None:
        wq, sw, _, axis, _ = _weight_q(w, w_bits, -1, None, per_channel)
        w = qmath.dequantize(wq, sw, 0, axis)
    fm = _float_mode(a_bits)
    if fm:
        x2 = qmath.round_to_float(x2, fm)
    if _float_mode(w_bits):
        w = qmath.round_to_float(w.astype(np.float32), _float_mode(w_bits))
    y = x2 @ work(w)
    return y.reshape(*lead, -1)


def gemm(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, **prec) -> np.ndarray:
    """te_matmul(x, w) + bias (fp32); `prec` are te_matmul's precision keywords."""
    if w.ndim != 2:
        raise KernelError("GEMM weight must be 2-D")
    y = te_matmul(x, w, **prec)
    if bias is not None:
        y = y + work(bias)
    return y


def qkv_proj(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray,
             bq: np.ndarray | None = None, bk: np.ndarray | None = None,
             bv: np.ndarray | None = None, *, w_quants: list[dict | None] | None = None,
             **prec) -> list[np.ndarray]:
    """The three projections of x (Q, K, V), each a gemm with its own weight quantization."""
    wqs = w_quants or [None, None, None]
    return [gemm(x, w, b, w_quant=wqt, **prec)
            for w, b, wqt in zip((wq, wk, wv), (bq, bk, bv), wqs, strict=True)]


def matmul(a: np.ndarray, b: np.ndarray, *, a_bits: Bits = None, a_static: dict | None = None,
           b_static: dict | None = None) -> np.ndarray:
    """Batched a @ b of two activations (ONNX MatMul). Integer `a_bits` quantizes both
    float operands (static or dynamic per tensor) and multiplies exactly; two integer
    operands multiply in int64."""
    if isinstance(a_bits, int) and a.dtype.kind == "f" and b.dtype.kind == "f":
        aq, sa, _ = qmath.quantize_activation(a, a_bits, a_static)
        bq, sb, _ = qmath.quantize_activation(b, a_bits, b_static)
        acc = qmath.int_matmul(aq, bq)
        return acc.astype(np.float32) * np.float32(sa * sb)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    return np.matmul(a, b)


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zero_point=None, b_zero_point=None
                   ) -> np.ndarray:  # fmt: skip
    """ONNX MatMulInteger: (a - a_zp) @ (b - b_zp) in int32."""
    return qmath.int_matmul(a, b, 0 if a_zero_point is None else a_zero_point,
                            0 if b_zero_point is None else b_zero_point)


def qlinear_multiplier(sa, sb, sy) -> np.ndarray:  # noqa: ANN001
    """The requantization multiplier (sa·sb)/sy in float32 (per output channel when sb is
    a vector), computed in this order, as onnxruntime does; the tiled epilogue's constant
    is this very array."""
    return ((np.asarray(sa, np.float32) * np.asarray(sb, np.float32))
            / np.asarray(sy, np.float32)).astype(np.float32)


def qlinear_matmul(a, sa, za, b, sb, zb, sy, zy) -> np.ndarray:  # noqa: ANN001
    """ONNX QLinearMatMul: requantize((a - za) @ (b - zb), sa·sb/sy, zy) at 8 bits."""
    acc = qmath.int_matmul(a, b, za, zb)
    return qmath.requantize(acc, qlinear_multiplier(sa, sb, sy), zy, 8, zy.dtype == np.int8)


def _centered(q: np.ndarray, zp, axis_len: int | None = None) -> np.ndarray:  # noqa: ANN001
    """q - zp as int32; a vector zp is per output channel (axis 0 of an OI… weight)."""
    z = np.asarray(zp if zp is not None else 0).astype(np.int32)
    if z.size > 1:
        z = z.reshape((-1,) + (1,) * (q.ndim - 1))
    return q.astype(np.int32) - z


def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, strides: list[int],  # noqa: ANN001
                 pads: list[int], dilations: list[int], group: int = 1) -> np.ndarray:
    """ONNX ConvInteger: conv(x - x_zp, w - w_zp) in int32 (padding is the real 0, i.e. x_zp
    in x's integers; w_zp per tensor or per output channel)."""
    xc = np.asarray(x).astype(np.int32) - np.asarray(
        x_zero_point if x_zero_point is not None else 0).astype(np.int32)
    return conv_nd(xc, _centered(np.asarray(w), w_zero_point), strides, pads, dilations,
                   group)


def qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias=None, *, strides: list[int],  # noqa: ANN001
                 pads: list[int], dilations: list[int], group: int = 1) -> np.ndarray:
    """ONNX QLinearConv: requantize(conv(x - zx, w - zw) + bias, sx·sw[o]/sy, zy) at 8 bits
    (bias int32 at scale sx·sw, weight scales / zero points per tensor or per output
    channel)."""
    acc = conv_integer(x, w, zx, zw, strides=strides, pads=pads, dilations=dilations,
                       group=group).astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias).astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    m = qlinear_multiplier(sx, sw, sy)
    m = m.reshape((1, -1) + (1,) * (acc.ndim - 2)) if m.size > 1 else m.reshape(())
    return qmath.requantize(acc.astype(np.int32), m, zy, 8, np.asarray(zy).dtype == np.int8)


def conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, strides: list[int],
         pads: list[int], dilations: list[int], group: int = 1, a_bits: Bits = None,
         w_bits: Bits = None, x_static: dict | None = None, w_quant: dict | None = None,
         per_channel: bool = True) -> np.ndarray:
    """N-d convolution (NC…, OI…) at the TE's precision, + bias (fp32).

    Integer activation and weight bits (symmetric, zero points 0) multiply exactly like
    the GEMM: int32 accumulators, then ``acc · (s_x · s_w[o])`` and the bias, in that order
    (the tiled epilogue computes the same). Other modes fake-quantize the operands (an
    fp16 / bf16 width rounds its operand to that format) and convolve in fp32."""
    xf = work(x)
    wf = work(w)
    if isinstance(a_bits, int) and (isinstance(w_bits, int) or w_quant is not None):
        xq, sx, zx = qmath.quantize_activation(xf, a_bits, x_static)
        wq, sw, zw, axis, block = _weight_q(wf, w_bits if isinstance(w_bits, int) else 8, 0,
                                            w_quant, per_channel)
        if not np.any(np.asarray(zx)) and not np.any(np.asarray(zw)) and not block \
                and axis in (0, None):
            acc = conv_nd(xq, wq, strides, pads, dilations, group)
            sw = np.asarray(sw, np.float32)
            sw_b = sw.reshape((1, -1) + (1,) * (acc.ndim - 2)) if sw.size > 1 \
                else sw.reshape(())
            y = acc.astype(np.float32) * (np.asarray(sx, np.float32) * sw_b)
            return _plus_bias(y, bias)
        xf = qmath.dequantize(xq, sx, zx)
        wf = qmath.dequantize(wq, sw, zw, axis, block)
    else:
        if isinstance(a_bits, int):
            xf = qmath.dequantize(*qmath.quantize_activation(xf, a_bits, x_static))
        if isinstance(w_bits, int):
            wq, sw, zw, axis, _ = _weight_q(wf, w_bits, 0, w_quant, per_channel)
            wf = qmath.dequantize(wq, sw, zw, axis)
        # a 16-bit float width rounds its operand, as te_matmul does
        if a_bits in ("fp16", "bf16"):
            xf = qmath.round_to_float(xf, str(a_bits))
        if w_bits in ("fp16", "bf16"):
            wf = qmath.round_to_float(wf.astype(np.float32), str(w_bits))
    return _plus_bias(conv_nd(xf, wf, strides, pads, dilations, group), bias)


def _plus_bias(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if bias is None:
        return y
    return y + bias.astype(np.float32).reshape((1, -1) + (1,) * (y.ndim - 2))


def conv_nd(x: np.ndarray, w: np.ndarray, strides: list[int], pads: list[int],
            dil: list[int], group: int, pad_value: int = 0) -> np.ndarray:  # fmt: skip
    """N-d convolution (NC*, OI*) through sliding windows + one matmul per group.
    `pads` = [begin of each spatial axis..., end of each...] (ONNX order), filled with
    `pad_value` (an integer activation's zero point). Integer operands multiply
    exactly into int32 (`quant.int_matmul`); floats in fp32."""
    nsp = x.ndim - 2
    pad = [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)]
    xp = np.pad(x, pad, constant_values=pad_value) if pad_value else np.pad(x, pad)
    ks = w.shape[2:]
    span = [(ks[i] - 1) * dil[i] + 1 for i in range(nsp)]
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + nsp)))
    sl = [slice(None), slice(None)] + [slice(None, None, strides[i]) for i in range(nsp)]
    sl += [slice(None, None, dil[i]) for i in range(nsp)]
    win = win[tuple(sl)]  # N, C, out..., k...
    nb, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // group, o // group
    integer = x.dtype.kind in "iu" and w.dtype.kind in "iu"
    outs = []
    out_sp = win.shape[2:2 + nsp]
    for g in range(group):
        wg = win[:, g * cg:(g + 1) * cg]
        # -> N, out..., C, k...
        wg = np.moveaxis(wg, 1, 1 + nsp)
        cols = wg.reshape(nb * int(np.prod(out_sp)), -1)
        kg = w[g * og:(g + 1) * og].reshape(og, -1)
        yg = qmath.int_matmul(cols, kg.T) if integer else \
            work(cols) @ work(kg.T)
        outs.append(np.moveaxis(yg.reshape((nb,) + tuple(out_sp) + (og,)), -1, 1))
    return np.concatenate(outs, axis=1).astype(np.int32 if integer else work_dtype())


def conv2d_nhwc(x: np.ndarray, w: np.ndarray, *, stride: int = 1, padding: int = 0
                ) -> np.ndarray:  # fmt: skip
    """The TE's 2-D convolution as its implicit GEMM: x [n, h, w, c_in] (zero padding
    `padding` on each side of h and w), w [kh, kw, c_in, c_out] → [n, h_out, w_out, c_out]
    with K ordered (kh, kw, c_in). Integer operands multiply exactly into int32
    (int_matmul); floats in fp32."""
    n, _, _, c = x.shape
    kh, kw, _, co = w.shape
    xp = np.pad(x, [(0, 0), (padding, padding), (padding, padding), (0, 0)])
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))
    win = win[:, ::stride, ::stride]  # n, h_out, w_out, c, kh, kw
    ho, wo = win.shape[1], win.shape[2]
    cols = np.moveaxis(win, 3, 5).reshape(n * ho * wo, kh * kw * c)
    wm = w.reshape(kh * kw * c, co)
    if x.dtype.kind in "iu" and w.dtype.kind in "iu":
        y = qmath.int_matmul(cols, wm)
    else:
        y = cols.astype(np.float32) @ wm.astype(np.float32)
    return y.reshape(n, ho, wo, co)
