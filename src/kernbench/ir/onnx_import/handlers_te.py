"""Handlers of the tensor-engine ONNX ops (Conv, Attention) and the quantization ops
(QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
QLinearConv, ConvInteger)."""

from __future__ import annotations

import numpy as np
import onnx

from kernbench.ir.model import QuantParams
from kernbench.ir.onnx_import.handlers_basic import transpose_is_view
from kernbench.ir.onnx_import.lower import Lowering
from kernbench.ir.onnx_import.onnx_util import (
    _attrs,
    _in,
    _out,
)


def _conv(lw: Lowering, node: onnx.NodeProto) -> None:
    ins = [node.input[0], node.input[1]] + ([node.input[2]] if _in(node, 2) else [])
    lw.emit("CONV", ins, [node.output[0]], _conv_attrs(lw, node, node.input[0], node.input[1]))


def _conv_attrs(lw: Lowering, node: onnx.NodeProto, x: str, w: str) -> dict:
    """The IR conv attributes of a Conv / QLinearConv / ConvInteger node (auto_pad
    resolved into explicit pads)."""
    at = _attrs(node)
    xs, ws = lw.shape(x), lw.shape(w)
    nsp = len(xs) - 2
    ks = list(at.get("kernel_shape", ws[2:]))
    strides = list(at.get("strides", [1] * nsp))
    dil = list(at.get("dilations", [1] * nsp))
    pads = list(at.get("pads", [0] * (2 * nsp)))
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            out = -(-xs[2 + i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (ks[i] - 1) * dil[i] + 1 - xs[2 + i])
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nsp] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    return {"strides": strides, "pads": pads, "dilations": dil,
            "group": int(at.get("group", 1)), "kernel_shape": ks}


def _attention(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    if len(node.output) > 3 and node.output[3]:
        raise lw.error("Attention output qk_matmul_output not supported")
    if len(node.input) > 6 and node.input[6]:
        raise lw.error("Attention input nonpad_kv_seqlen not supported")
    q, k, v = node.input[0], node.input[1], node.input[2]
    mask, pk, pv = _in(node, 3), _in(node, 4), _in(node, 5)
    qs = lw.shape(q)
    out = node.output[0]
    rank3 = len(qs) == 3
    hq = int(at.get("q_num_heads", 0) or 0)
    hkv = int(at.get("kv_num_heads", 0) or 0)

    def to4(x: str, heads: int) -> str:
        s = lw.shape(x)
        d = s[2] // heads
        r = lw.tmp(x, [s[0], s[1], heads, d], lw.dtype(x))
        lw.emit("RESHAPE", [x], [r], {"shape": [s[0], s[1], heads, d], "view": True})
        t = lw.tmp(x, [s[0], heads, s[1], d], lw.dtype(x))
        perm = [0, 2, 1, 3]
        lw.emit("TRANSPOSE", [r], [t],
                {"perm": perm, "view": transpose_is_view([s[0], s[1], heads, d], perm)})  # fmt: skip
        return t

    if rank3:
        q, k, v = to4(q, hq), to4(k, hkv), to4(v, hkv)
    else:
        hq, hkv = lw.shape(q)[1], lw.shape(k)[1]
    past = 0
    if pk:
        pks, ks = lw.shape(pk), lw.shape(k)
        past = pks[2]
        outk = _out(node, 1) or lw.tmp(out, [ks[0], ks[1], pks[2] + ks[2], ks[3]], lw.dtype(k))
        lw.emit("KV_UPDATE", [pk, k], [outk], {"axis": 2}, [[ks[0], ks[1], pks[2] + ks[2], ks[3]]],
                [lw.dtype(k)])  # fmt: skip
        k = outk
    elif _out(node, 1):
        lw.alias[_out(node, 1)] = lw.name(k)
    if pv:
        pvs, vs = lw.shape(pv), lw.shape(v)
        outv = _out(node, 2) or lw.tmp(out, [vs[0], vs[1], pvs[2] + vs[2], vs[3]], lw.dtype(v))
        lw.emit("KV_UPDATE", [pv, v], [outv], {"axis": 2}, [[vs[0], vs[1], pvs[2] + vs[2], vs[3]]],
                [lw.dtype(v)])  # fmt: skip
        v = outv
    elif _out(node, 2):
        lw.alias[_out(node, 2)] = lw.name(v)
    qs4, ks4, vs4 = lw.shape(q), lw.shape(k), lw.shape(v)
    head_dim = qs4[3]
    scale = at.get("scale")
    scale = float(scale) if scale is not None else float(1.0 / np.sqrt(head_dim))
    attrs = {
        "num_heads": hq, "num_kv_heads": hkv, "head_dim": head_dim, "scale": scale,
        "causal": bool(int(at.get("is_causal", 0))), "causal_offset": past,
        "softcap": float(at.get("softcap", 0.0) or 0.0),
        "mask": "none",
    }  # fmt: skip
    ins = [q, k, v]
    if mask:
        attrs["mask"] = "bool" if lw.dtype(mask) == "bool" else "additive"
        ins.append(mask)
    if at.get("softmax_precision") not in (None, onnx.TensorProto.FLOAT):
        raise lw.error("Attention softmax_precision other than float not supported")
    ys = [qs4[0], hq, qs4[2], vs4[3]]
    if rank3:
        t = lw.tmp(out, ys, lw.dtype(out))
        lw.emit("ATTENTION", ins, [t], attrs, [ys], [lw.dtype(out)])
        t2 = lw.tmp(out, [ys[0], ys[2], ys[1], ys[3]], lw.dtype(out))
        lw.emit("TRANSPOSE", [t], [t2], {"perm": [0, 2, 1, 3],
                "view": transpose_is_view(ys, [0, 2, 1, 3])})  # fmt: skip
        lw.emit("RESHAPE", [t2], [out], {"shape": lw.shape(out), "view": True})
    else:
        lw.emit("ATTENTION", ins, [out], attrs)
    del ks4


# ---------------------------------------------------------------- quantization ops
def _qparams(lw: Lowering, node: onnx.NodeProto, data_shape: list[int]) -> tuple[dict, bool]:
    at = _attrs(node)
    rank = len(data_shape)
    scale = node.input[1]
    ss = lw.shape(scale)
    block = int(at.get("block_size", 0) or 0)
    axis = None
    if len(ss) >= 1 and int(np.prod(ss)) != 1 or block:
        axis = int(at.get("axis", 1)) % max(rank, 1)
    return {"axis": axis, "block_size": block}, True


def _dequantize(lw: Lowering, node: onnx.NodeProto) -> None:
    x, scale, zp = node.input[0], node.input[1], _in(node, 2)
    xs = lw.shape(x)
    qp, _ = _qparams(lw, node, xs)
    xdt = lw.dtype(x)
    if xdt not in ("int8", "uint8", "int4", "uint4", "int16", "uint16", "int32"):
        raise lw.error(f"DequantizeLinear of {xdt} not supported")
    out_dt = lw.dtype(node.output[0])
    xc, sc = lw.const(x), lw.const(scale)
    zc = lw.const(zp) if zp else np.zeros((), np.int8)
    if xc is not None and sc is not None and zc is not None and xdt != "int32" and out_dt == "fp32":
        zname = lw.name(zp) if zp else None
        lw.add_const(
            node.output[0],
            xc,
            quant=QuantParams(scale=lw.name(scale), zero_point=zname, dtype=xdt, **qp),
            dtype=xdt,
        )
        return
    ins = [x, scale] + ([zp] if zp else [])
    lw.emit("DEQUANTIZE", ins, [node.output[0]], dict(qp))


def _quantize(lw: Lowering, node: onnx.NodeProto) -> None:
    at = _attrs(node)
    x, scale, zp = node.input[0], node.input[1], _in(node, 2)
    xs = lw.shape(x)
    qp, _ = _qparams(lw, node, xs)
    out_dt = lw.dtype(node.output[0])
    if out_dt not in ("int8", "uint8", "int4", "uint4", "int16", "uint16"):
        raise lw.error(f"QuantizeLinear to {out_dt} not supported")
    if int(at.get("saturate", 1)) != 1 and out_dt.startswith("float"):
        raise lw.error("QuantizeLinear saturate=0 not supported")
    ins = [x, scale] + ([zp] if zp else [])
    lw.emit("QUANTIZE", ins, [node.output[0]], dict(qp, dtype=out_dt))


def _dyn_quant(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("DYNAMIC_QUANTIZE", [node.input[0]], list(node.output))


def _matmul_integer(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("MATMUL_INTEGER", list(node.input), [node.output[0]])


def _qlinear_matmul(lw: Lowering, node: onnx.NodeProto) -> None:
    lw.emit("QLINEAR_MATMUL", list(node.input), [node.output[0]])


def _qlinear_conv(lw: Lowering, node: onnx.NodeProto) -> None:
    """QLinearConv: inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B] as they
    are; the weight's scale / zero point may be per output channel."""
    if len(node.input) < 8 or not all(node.input[:8]):
        raise lw.error("QLinearConv needs its eight quantization inputs")
    lw.emit("QLINEAR_CONV", list(node.input), [node.output[0]],
            _conv_attrs(lw, node, node.input[0], node.input[3]))


def _conv_integer(lw: Lowering, node: onnx.NodeProto) -> None:
    """ConvInteger: x, w[, x_zp[, w_zp]] → int32."""
    lw.emit("CONV_INTEGER", list(node.input), [node.output[0]],
            _conv_attrs(lw, node, node.input[0], node.input[1]))
