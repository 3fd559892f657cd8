"""Reference interpreter: runs an IR Graph with numpy.

Quantization semantics (ADR-0102), applied when `quantize=True` (the default) from each
layer's qbits annotations; all quantized arithmetic goes through `kernbench.numerics.quant`:

- TE layers (GEMM, QKV_PROJ, CONV, MATMUL, ATTENTION) with integer qbits quantize their
  activation inputs (per tensor, symmetric; static scale if the tensor carries `quant`,
  else dynamic) and their weights (symmetric per output channel, or the imported integer
  data), multiply in exact integer arithmetic (int32 accumulators) and dequantize the
  accumulator in the epilogue (acc * s_x * s_w + bias).
- ATTENTION quantizes Q to qbits_activation and K / V to qbits_kv; KV_UPDATE stores the
  cache in qbits_kv.
- VE layers (norms, softmax, activations, elementwise) compute in fp32 on dequantized
  inputs; with fp16 / bf16 annotations their outputs are rounded to that precision.

`run(..., keep_all=True)` also returns every tensor's value, so callers can find the first
layer where two executions diverge (`layer_outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.onnx_import.lower import np_dtype
from kernbench.numerics import quant as qmath

Kernel = Callable[["Interpreter", LayerIR, list[Any]], list[np.ndarray]]
KERNELS: dict[str, Kernel] = {}


def kernel(*names: str) -> Callable[[Kernel], Kernel]:
    def deco(f: Kernel) -> Kernel:
        for n in names:
            KERNELS[n] = f
        return f

    return deco


class Interpreter:
    def __init__(self, graph: Graph, *, quantize: bool = True) -> None:
        self.g = graph
        self.quantize = quantize
        self._const_cache: dict[str, np.ndarray] = {}
        qc = graph.qconfig or {}
        self.per_channel = qc.get("weight_granularity", "per_channel") == "per_channel"
        self._wq_cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------ values
    def const_value(self, tid: str) -> np.ndarray:
        """The real value of a constant (dequantized if it holds integers)."""
        v = self._const_cache.get(tid)
        if v is None:
            t = self.g.tensors[tid]
            if tid not in self.g.weights:
                raise InputError("constant has no data (weights.npz missing?)", where=f"tensor {tid}")
            raw = self.g.weights[tid]
            if t.quant is not None:
                v = self.dequant_const(t, raw)
            else:
                v = raw
            self._const_cache[tid] = v
        return v

    def dequant_const(self, t: TensorIR, raw: np.ndarray) -> np.ndarray:
        q = t.quant
        assert q is not None
        scale = self.g.weights[q.scale]
        zp = self.g.weights[q.zero_point] if q.zero_point else 0
        return qmath.dequantize(raw, scale, zp, q.axis, q.block_size)

    def run(self, feeds: dict[str, np.ndarray], *, keep_all: bool = False) -> Any:
        env: dict[str, np.ndarray] = {}
        for name in self.g.inputs:
            if name not in feeds:
                raise InputError(f"missing input {name!r}")
            t = self.g.tensors[name]
            a = np.asarray(feeds[name])
            if list(a.shape) != list(t.shape):
                raise InputError(f"input {name!r} has shape {list(a.shape)}, expected {t.shape}")
            env[name] = a
        for node in self.g.nodes:
            ins = []
            for tid in node.inputs:
                if not tid:
                    ins.append(None)
                elif tid in env:
                    ins.append(env[tid])
                else:
                    ins.append(self.const_value(tid))
            fn = KERNELS.get(node.op_type)
            if fn is None:
                raise InputError(f"op_type {node.op_type!r} has no interpreter kernel",
                                 where=f"node {node.id}")  # fmt: skip
            outs = fn(self, node, ins)
            for tid, val in zip(node.outputs, outs, strict=False):
                if not tid:
                    continue
                t = self.g.tensors[tid]
                val = np.asarray(val)
                want = np_dtype(t.dtype) if t.quant is None else val.dtype
                if val.dtype != want:
                    val = val.astype(want)
                env[tid] = val
        outs = {o: env[o] if o in env else self.const_value(o) for o in self.g.outputs}
        if keep_all:
            return outs, env
        return outs

    # ------------------------------------------------------------ quant helpers
    def qa(self, node: LayerIR) -> Any:
        return node.qbits_activation if self.quantize else None

    def qw(self, node: LayerIR) -> Any:
        return node.qbits_weight if self.quantize else None

    def qkv(self, node: LayerIR) -> Any:
        return node.qbits_kv if self.quantize else None

    def act_quant(self, x: np.ndarray, tid: str, bits: int):
        """Quantize an activation entering a TE: returns (q, scale, zero_point)."""
        t = self.g.tensors.get(tid)
        if t is not None and t.quant is not None and t.quant.axis is None:
            qd = t.quant.dtype
            qbits = int(qd.lstrip("uint"))
            if qbits == bits:
                scale = self.g.weights[t.quant.scale]
                zp = self.g.weights[t.quant.zero_point] if t.quant.zero_point else 0
                signed = not qd.startswith("u")
                return qmath.quantize(x, scale, zp, bits, signed), scale, zp
        scale = qmath.symmetric_scale(x, bits)
        return qmath.quantize(x, scale, 0, bits, True), scale, 0

    def weight_quant(self, tid: str, w: np.ndarray, bits: int, axis: int):
        """(q, scale, zero_point, axis, block) for a weight tensor at `bits`."""
        t = self.g.tensors.get(tid)
        if t is not None and t.quant is not None:
            q = t.quant
            raw = self.g.weights[tid]
            zp = self.g.weights[q.zero_point] if q.zero_point else 0
            return raw, self.g.weights[q.scale], zp, q.axis, q.block_size
        key = (tid, bits)
        if key not in self._wq_cache:
            ax = axis if self.per_channel else None
            self._wq_cache[key] = qmath.quantize_weight(w, bits, ax)
        qv, s = self._wq_cache[key]
        return qv, s, 0, (axis % w.ndim if self.per_channel else None), 0


def _float_mode(bits: Any) -> str | None:
    return bits if bits in ("fp16", "bf16") else None


def te_matmul(interp: Interpreter, node: LayerIR, x: np.ndarray, x_id: str,
              w: np.ndarray, w_id: str) -> np.ndarray:  # fmt: skip
    """x[..., K] @ w[K, N] with the layer's quantization; returns fp32."""
    qa, qw = interp.qa(node), interp.qw(node)
    wt = interp.g.tensors.get(w_id)
    imported = wt is not None and wt.quant is not None and interp.quantize
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float32)
    if isinstance(qa, int) and (isinstance(qw, int) or imported):
        xq, sx, zx = interp.act_quant(x2, x_id, qa)
        wq, sw, zw, axis, block = interp.weight_quant(w_id, w, qw if isinstance(qw, int) else 8, -1)
        sw = np.asarray(sw, np.float32)
        zw = np.asarray(zw)
        k, n = wq.shape
        if block and axis == 0:
            # blocked along K: one integer GEMM per block, scales applied per block
            y = np.zeros((x2.shape[0], n), np.float32)
            for bi, k0 in enumerate(range(0, k, block)):
                k1 = min(k, k0 + block)
                zrow = zw[bi] if zw.ndim == 2 else zw
                acc = qmath.int_matmul(xq[:, k0:k1], wq[k0:k1], zx, zrow)
                y += acc.astype(np.float32) * (np.float32(sx) * sw[bi])
        else:
            if axis is None or sw.ndim == 0:
                sw_b = sw.reshape(())
                zw_b = zw.reshape(()) if zw.size == 1 else zw
            elif axis % 2 == 1:
                sw_b, zw_b = sw.reshape(-1), (zw.reshape(-1) if zw.size > 1 else zw.reshape(()))
            else:
                raise InputError("weight quantized along K needs block_size", where=f"node {node.id}")
            acc = qmath.int_matmul(xq, wq, zx, zw_b)
            y = acc.astype(np.float32) * (np.asarray(sx, np.float32) * sw_b)
        return y.reshape(*lead, -1)
    if isinstance(qa, int):
        x2 = qmath.fake_quant(x2, qa) if not (interp.g.tensors.get(x_id) and
                                              interp.g.tensors[x_id].quant) else \
            qmath.dequantize(*interp.act_quant(x2, x_id, qa))  # fmt: skip
    if isinstance(qw, int) and not imported:
        wq, sw, _, axis, _ = interp.weight_quant(w_id, w, qw, -1)
        w = qmath.dequantize(wq, sw, 0, axis)
    fm = _float_mode(qa)
    if fm:
        x2 = qmath.round_to_float(x2, fm)
    if _float_mode(qw):
        w = qmath.round_to_float(w.astype(np.float32), _float_mode(qw))
    y = x2 @ w.astype(np.float32)
    return y.reshape(*lead, -1)


# ---------------------------------------------------------------- kernels
@kernel("GEMM")
def _k_gemm(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x, w = ins[0], ins[1]
    if w.ndim != 2:
        raise InputError("GEMM weight must be 2-D", where=f"node {n.id}")
    y = te_matmul(it, n, x, n.inputs[0], w, n.inputs[1])
    if len(ins) > 2 and ins[2] is not None:
        y = y + ins[2].astype(np.float32)
    return [y]


@kernel("QKV_PROJ")
def _k_qkv(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x = ins[0]
    outs = []
    for j in range(3):
        y = te_matmul(it, n, x, n.inputs[0], ins[1 + j], n.inputs[1 + j])
        if len(ins) > 4 and ins[4 + j] is not None:
            y = y + ins[4 + j].astype(np.float32)
        outs.append(y)
    return outs


@kernel("MATMUL")
def _k_matmul(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a, b = ins
    qa = it.qa(n)
    if isinstance(qa, int) and a.dtype.kind == "f" and b.dtype.kind == "f":
        aq, sa, _ = it.act_quant(a, n.inputs[0], qa)
        bq, sb, _ = it.act_quant(b, n.inputs[1], qa)
        acc = qmath.int_matmul(aq, bq)
        return [acc.astype(np.float32) * np.float32(sa * sb)]
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return [np.matmul(a.astype(np.int64), b.astype(np.int64))]
    return [np.matmul(a, b)]


@kernel("IDENTITY")
def _k_identity(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [np.array(ins[0], copy=True)]


def _erf(x: np.ndarray) -> np.ndarray:
    return _erf_vec(x.astype(np.float64)).astype(x.dtype if x.dtype.kind == "f" else np.float32)


def _erf_vec(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # type: ignore

        return erf(x)
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size < 4096 else _erf_fast(x)


def _erf_fast(x: np.ndarray) -> np.ndarray:
    # Abramowitz-Stegun 7.1.26 refined by one Newton step on float64 (|err| < 1e-12).
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    # Numerical Recipes erfc approximation (fractional error < 1.2e-7), then refine.
    y = t * np.exp(
        -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
            -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
                -0.82215223 + t * 0.17087277))))))))
    )  # fmt: skip
    erf = 1.0 - y
    # Newton refinement: f(e) = erf - target is not available; use series correction via
    # derivative 2/sqrt(pi) exp(-x^2) on the erfc residual is not needed at 1.2e-7 for fp32.
    return sign * erf


def _f(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind == "f" else x.astype(np.float32)


UNARY_FNS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sqrt": np.sqrt,
    "reciprocal": lambda x: np.reciprocal(_f(x)),
    "neg": np.negative,
    "erf": _erf,
    "tanh": np.tanh,
    "sigmoid": lambda x: (1.0 / (1.0 + np.exp(-_f(x)))).astype(_f(x).dtype),
    "exp": np.exp,
    "log": np.log,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "isnan": np.isnan,
    "not": np.logical_not,
    "cos": np.cos,
    "sin": np.sin,
    "floor": np.floor,
    "ceil": np.ceil,
}


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(a.dtype)
    return np.divide(a, b)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        if b.size == 1 and float(b.reshape(-1)[0]) == 2.0:
            return (a * a).astype(a.dtype)
        return np.power(a, b.astype(a.dtype)).astype(a.dtype)
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _div,
    "pow": _pow,
    "equal": np.equal,
    "less": np.less,
    "greater": np.greater,
    "less_equal": np.less_equal,
    "greater_equal": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


@kernel("ADD", "MUL", "ELEMENTWISE")
def _k_elementwise(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    op = {"ADD": "add", "MUL": "mul"}.get(n.op_type) or n.attributes["op"]
    with np.errstate(all="ignore"):
        if op in UNARY_FNS:
            return [UNARY_FNS[op](ins[0])]
        if op in BINARY_FNS:
            a, b = ins
            if op in ("add", "sub", "mul", "div") and a.dtype != b.dtype and a.dtype.kind == "f":
                b = b.astype(a.dtype)
            return [BINARY_FNS[op](a, b)]
        if op == "where":
            return [np.where(ins[0], ins[1], ins[2])]
        if op in ("max", "min"):
            f = np.maximum if op == "max" else np.minimum
            out = ins[0]
            for x in ins[1:]:
                out = f(out, x)
            return [out]
        if op == "cast":
            return [_cast(ins[0], n.attributes["to"])]
    raise InputError(f"unknown elementwise op {op!r}", where=f"node {n.id}")


def _cast(x: np.ndarray, to: str) -> np.ndarray:
    dt = np_dtype(to)
    if to in ("int4", "uint4"):
        lo, hi = qmath.qrange(4, to == "int4")
        return np.clip(np.trunc(x), lo, hi).astype(dt)
    if x.dtype.kind == "f" and dt.kind in "iu":
        return np.trunc(x).astype(dt)
    return x.astype(dt)


@kernel("REDUCE")
def _k_reduce(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a = n.attributes
    x = ins[0]
    axes = tuple(a["axes"])
    kd = bool(a["keepdims"])
    op = a["op"]
    if op == "mean":
        y = np.mean(x.astype(np.float64) if x.dtype.kind != "f" else x, axis=axes, keepdims=kd,
                    dtype=np.float64 if x.dtype == np.float16 else None)  # fmt: skip
    elif op == "sum":
        y = np.sum(x, axis=axes, keepdims=kd)
    elif op == "max":
        y = np.max(x, axis=axes, keepdims=kd) if x.size else np.full(
            _red_shape(x.shape, axes, kd), -np.inf, x.dtype)  # fmt: skip
    elif op == "min":
        y = np.min(x, axis=axes, keepdims=kd) if x.size else np.full(
            _red_shape(x.shape, axes, kd), np.inf, x.dtype)  # fmt: skip
    else:
        raise InputError(f"unknown reduce op {op!r}", where=f"node {n.id}")
    return [np.asarray(y).astype(x.dtype)]


def _red_shape(shape: tuple[int, ...], axes: tuple[int, ...], kd: bool) -> tuple[int, ...]:
    return tuple((1 if i in axes else d) for i, d in enumerate(shape) if kd or i not in axes)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float32)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return e / s


@kernel("SOFTMAX")
def _k_softmax(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return [softmax(ins[0], n.attributes["axis"]).astype(ins[0].dtype)]


@kernel("LAYER_NORM")
def _k_layernorm(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = n.attributes["axis"]
    eps = n.attributes["eps"]
    axes = tuple(range(axis, x.ndim))
    xf = x.astype(np.float32)
    mean = np.mean(xf, axis=axes, keepdims=True)
    d = xf - mean
    var = np.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + np.float32(eps))
    y = d * inv * ins[1].astype(np.float32)
    if len(ins) > 2 and ins[2] is not None:
        y = y + ins[2].astype(np.float32)
    return [y.astype(x.dtype), mean, inv]


@kernel("RMS_NORM")
def _k_rmsnorm(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x = ins[0]
    axes = tuple(range(n.attributes["axis"], x.ndim))
    xf = x.astype(np.float32)
    ms = np.mean(xf * xf, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(ms + np.float32(n.attributes["eps"]))
    y = xf * inv
    if len(ins) > 1 and ins[1] is not None:
        y = y * ins[1].astype(np.float32)
    return [y.astype(x.dtype)]


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    xf = x.astype(np.float32)
    if approximate == "tanh":
        c = np.float32(math.sqrt(2.0 / math.pi))
        y = 0.5 * xf * (1.0 + np.tanh(c * (xf + np.float32(0.044715) * xf * xf * xf)))
    else:
        y = 0.5 * xf * (1.0 + _erf(xf * np.float32(1.0 / math.sqrt(2.0))))
    return y.astype(x.dtype)


@kernel("GELU")
def _k_gelu(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [gelu(ins[0], n.attributes.get("approximate", "none"))]


@kernel("SILU")
def _k_silu(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x = ins[0].astype(np.float32)
    return [(x / (1.0 + np.exp(-x))).astype(ins[0].dtype)]


@kernel("EMBEDDING")
def _k_embedding(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    idx, table = ins
    return [np.take(table, idx.astype(np.int64), axis=0)]


@kernel("GATHER")
def _k_gather(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [np.take(ins[0], ins[1].astype(np.int64), axis=n.attributes["axis"])]


@kernel("GATHER_ELEMENTS")
def _k_gather_el(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    data, idx = ins
    axis = n.attributes["axis"]
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take_along_axis(data, idx, axis=axis)]


@kernel("GATHER_ND")
def _k_gather_nd(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    data, idx = ins[0], ins[1].astype(np.int64)
    bd = n.attributes.get("batch_dims", 0)
    bshape = data.shape[:bd]
    nb = int(np.prod(bshape)) if bd else 1
    d2 = data.reshape((nb,) + data.shape[bd:])
    i2 = idx.reshape((nb,) + idx.shape[bd:])
    k = idx.shape[-1]
    outs = []
    for b in range(nb):
        ib = i2[b].reshape(-1, k)
        dims = np.array(d2.shape[1:1 + k])
        ib = np.where(ib < 0, ib + dims, ib)
        outs.append(d2[b][tuple(ib.T)])
    out = np.stack(outs)
    return [out.reshape(bshape + idx.shape[bd:-1] + data.shape[bd + k:])]


@kernel("RESHAPE")
def _k_reshape(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [ins[0].reshape(n.attributes["shape"])]


@kernel("TRANSPOSE")
def _k_transpose(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [np.transpose(ins[0], n.attributes["perm"])]


@kernel("SPLIT")
def _k_split(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    axis = n.attributes["axis"]
    idx = np.cumsum(n.attributes["sizes"])[:-1]
    return list(np.split(ins[0], idx, axis=axis))


@kernel("SLICE")
def _k_slice(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a = n.attributes
    sl = []
    for s, e, p in zip(a["starts"], a["ends"], a["steps"], strict=True):
        sl.append(slice(s, None if (p < 0 and e < 0) else e, p))
    return [ins[0][tuple(sl)]]


@kernel("CONCAT")
def _k_concat(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [np.concatenate(ins, axis=n.attributes["axis"])]


@kernel("EXPAND")
def _k_expand(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    return [np.broadcast_to(ins[0], n.attributes["shape"]).copy()]


@kernel("KV_UPDATE")
def _k_kv_update(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    past, new = ins[0], ins[1]
    y = np.concatenate([past, new], axis=n.attributes.get("axis", 2))
    kv = it.qkv(n)
    out = it.g.tensors.get(n.outputs[0])
    if isinstance(kv, int) and y.dtype.kind == "f" and out is not None and out.quant is not None:
        # a statically calibrated cache (compiler): stored at kv bits with that scale
        y = qmath.fake_quant(y, kv, scale=it.g.weights[out.quant.scale])
    elif isinstance(kv, int) and y.dtype.kind == "f":
        y = qmath.fake_quant(y, kv)
    elif _float_mode(kv):
        y = qmath.round_to_float(y, kv)
    return [y]


@kernel("CONV")
def _k_conv(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    a = n.attributes
    qa, qw = it.qa(n), it.qw(n)
    xf = x.astype(np.float32)
    wf = w.astype(np.float32)
    if isinstance(qa, int):
        xf = qmath.dequantize(*it.act_quant(xf, n.inputs[0], qa))
    if isinstance(qw, int):
        wq, sw, zw, axis, _ = it.weight_quant(n.inputs[1], wf, qw, 0)
        wf = qmath.dequantize(wq, sw, zw, axis)
    y = conv_nd(xf, wf, a["strides"], a["pads"], a["dilations"], a["group"])
    if b is not None:
        y = y + b.astype(np.float32).reshape((1, -1) + (1,) * (y.ndim - 2))
    return [y]


def conv_nd(x: np.ndarray, w: np.ndarray, strides: list[int], pads: list[int],
            dil: list[int], group: int) -> np.ndarray:  # fmt: skip
    """N-d convolution (NC*, OI*) through sliding windows + one matmul per group."""
    nsp = x.ndim - 2
    pad = [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)]
    xp = np.pad(x, pad)
    ks = w.shape[2:]
    span = [(ks[i] - 1) * dil[i] + 1 for i in range(nsp)]
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + nsp)))
    sl = [slice(None), slice(None)] + [slice(None, None, strides[i]) for i in range(nsp)]
    sl += [slice(None, None, dil[i]) for i in range(nsp)]
    win = win[tuple(sl)]  # N, C, out..., k...
    nb, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // group, o // group
    outs = []
    out_sp = win.shape[2:2 + nsp]
    for g in range(group):
        wg = win[:, g * cg:(g + 1) * cg]
        # -> N, out..., C, k...
        wg = np.moveaxis(wg, 1, 1 + nsp)
        cols = wg.reshape(nb * int(np.prod(out_sp)), -1)
        kg = w[g * og:(g + 1) * og].reshape(og, -1)
        yg = cols @ kg.T
        outs.append(np.moveaxis(yg.reshape((nb,) + tuple(out_sp) + (og,)), -1, 1))
    return np.concatenate(outs, axis=1).astype(np.float32)


def attention_probs(s: np.ndarray, mask_bias: np.ndarray | None,
                    causal_offset: int | None) -> np.ndarray:
    """softmax(s + mask + causal) over the last axis; rows masked entirely give 0. Shared
    with the simulator's data pass (cmdq/data.py), which runs it on row blocks."""
    rows, cols = s.shape[-2], s.shape[-1]
    bias = np.zeros((rows, cols), np.float32)
    if mask_bias is not None:
        bias = bias + mask_bias
    if causal_offset is not None:
        allowed = np.arange(cols)[None, :] <= (np.arange(rows)[:, None] + causal_offset)
        bias = bias + np.where(allowed, np.float32(0), np.float32(-np.inf))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        p = softmax(s + bias, -1)
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    p = np.where(dead, np.float32(0), p)
    return np.nan_to_num(p, nan=0.0)


@kernel("ATTENTION")
def _k_attention(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a = n.attributes
    q, k, v = (x.astype(np.float32) for x in ins[:3])
    mask = ins[3] if len(ins) > 3 else None
    hq, hkv = a["num_heads"], a["num_kv_heads"]
    qa, kvb = it.qa(n), it.qkv(n)
    rep = hq // hkv
    if rep > 1:
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
    scale = np.float32(a["scale"])
    if isinstance(qa, int) and isinstance(kvb, int):
        qq, sq, _ = it.act_quant(q, n.inputs[0], qa)
        kq, sk, _ = it.act_quant(k, n.inputs[1], kvb)
        acc = qmath.int_matmul(qq, np.swapaxes(kq, -1, -2))
        s = acc.astype(np.float32) * (np.float32(sq) * np.float32(sk) * scale)
    else:
        if _float_mode(qa):
            q = qmath.round_to_float(q, qa)
        if _float_mode(kvb):
            k = qmath.round_to_float(k, kvb)
            v = qmath.round_to_float(v, kvb)
        sc = np.sqrt(scale)
        s = (q * sc) @ (np.swapaxes(k, -1, -2) * sc)
    if a.get("softcap", 0.0):
        cap = np.float32(a["softcap"])
        s = np.tanh(s / cap) * cap
    t_len = s.shape[-1]
    mask_bias = None
    if mask is not None:
        if mask.shape[-1] < t_len:
            padv = False if mask.dtype == np.bool_ else -np.inf
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, t_len - mask.shape[-1])],
                          constant_values=padv)  # fmt: skip
        mask_bias = (np.where(mask, np.float32(0), np.float32(-np.inf))
                     if mask.dtype == np.bool_ else mask.astype(np.float32))
    off = int(a.get("causal_offset", 0)) if a.get("causal") else None
    p = attention_probs(s, mask_bias, off)
    if isinstance(qa, int) and isinstance(kvb, int):
        # probabilities: a per-row scale (max of the row / qmax), so flat rows of long
        # sequences keep their resolution
        ps = qmath.row_scale(p, qa)
        pq = qmath.quantize_rows(p, ps, qa)
        vq, sv, _ = it.act_quant(v, n.inputs[2], kvb)
        acc = qmath.int_matmul(pq, vq)
        y = acc.astype(np.float32) * (ps * np.float32(sv))
    else:
        y = p @ v
    return [y.astype(ins[0].dtype)]


# ---------------------------------------------------------------- quantization ops
def _qp(it: Interpreter, n: LayerIR, ins: list[Any]):
    scale = ins[1]
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros((), np.int8)
    return scale, zp, n.attributes.get("axis"), n.attributes.get("block_size", 0)


@kernel("QUANTIZE")
def _k_quantize(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    scale, zp, axis, block = _qp(it, n, ins)
    dt = n.attributes["dtype"]
    bits = int(dt.lstrip("uint"))
    return [qmath.quantize(ins[0].astype(np.float32), scale.astype(np.float32), zp, bits,
                           not dt.startswith("u"), axis, block)]  # fmt: skip


@kernel("DEQUANTIZE")
def _k_dequantize(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    scale, zp, axis, block = _qp(it, n, ins)
    x = ins[0]
    if x.dtype == np.int32:
        return [((x.astype(np.int64) - zp.astype(np.int64)) * scale.astype(np.float64)).astype(
            np.float32)]  # fmt: skip
    return [qmath.dequantize(x, scale.astype(np.float32), zp, axis, block)]


@kernel("QDQ")
def _k_qdq(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    scale, zp, axis, block = _qp(it, n, ins)
    dt = n.attributes["dtype"]
    bits = int(dt.lstrip("uint"))
    q = qmath.quantize(ins[0].astype(np.float32), scale, zp, bits, not dt.startswith("u"),
                       axis, block)  # fmt: skip
    return [qmath.dequantize(q, scale, zp, axis, block)]


@kernel("DYNAMIC_QUANTIZE")
def _k_dynq(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x = ins[0].astype(np.float32)
    lo = min(0.0, float(np.min(x))) if x.size else 0.0
    hi = max(0.0, float(np.max(x))) if x.size else 0.0
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(0.0)
    if scale == 0:
        zp = np.uint8(0)
        q = np.zeros(x.shape, np.uint8)
    else:
        zp = np.uint8(np.clip(np.rint(np.float32(0 - lo) / scale), 0, 255))
        q = qmath.quantize(x, scale, zp, 8, False)
    return [q, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


@kernel("MATMUL_INTEGER")
def _k_matmul_integer(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a, b = ins[0], ins[1]
    azp = ins[2] if len(ins) > 2 and ins[2] is not None else 0
    bzp = ins[3] if len(ins) > 3 and ins[3] is not None else 0
    return [qmath.int_matmul(a, b, azp, bzp)]


@kernel("QLINEAR_MATMUL")
def _k_qlinear_matmul(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    a, sa, za, b, sb, zb, sy, zy = ins
    acc = qmath.int_matmul(a, b, za, zb)
    mult = (np.asarray(sa, np.float32) * np.asarray(sb, np.float32)) / np.asarray(sy, np.float32)
    signed = zy.dtype == np.int8
    if mult.ndim == 1:
        pass
    elif mult.ndim >= 2:
        mult = mult.reshape(mult.shape)
    return [qmath.requantize(acc, mult, zy, 8, signed)]


def run(graph: Graph, feeds: dict[str, np.ndarray], *, quantize: bool = True,
        keep_all: bool = False) -> Any:  # fmt: skip
    """Run `graph` on `feeds`; returns {output id: array} (and all values if keep_all)."""
    return Interpreter(graph, quantize=quantize).run(feeds, keep_all=keep_all)


def layer_outputs(graph: Graph, values: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """{layer id: [output arrays]} from the `keep_all` values of a run, in node order."""
    return {n.id: [values[o] for o in n.outputs if o in values] for n in graph.nodes}


@kernel("ROPE")
def _k_rope(it: Interpreter, n: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    x, cos, sin = ins
    xf = x.astype(np.float32)
    h = xf.shape[-1] // 2
    rot = np.concatenate([-xf[..., h:], xf[..., :h]], axis=-1)
    return [(xf * cos.astype(np.float32) + rot * sin.astype(np.float32)).astype(x.dtype)]
