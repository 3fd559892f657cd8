"""Quantization annotation pass: static activation scales by calibration.

The reference interpreter quantizes an activation entering a TE layer with a dynamic
symmetric per-tensor scale (max|x| / qmax) unless the IR gives a static one. Hardware
cannot see the whole tensor before its first tile, so the compiler calibrates: it runs
the interpreter once on calibration inputs (seeded, valid for the model) and records,
for every activation a TE layer quantizes, the range the dynamic run saw, as a static
`QuantParams` on the tensor (the compiled model then behaves as a statically calibrated
NPU does: values beyond the calibrated range saturate).

The compiled program must not depend on the CPU that compiled it: the
calibration run computes its float kernels in float64 (numerics.wide) and each scale is
max|x| / qmax rounded up to `quant.CALIB_MANTISSA_BITS` significant bits
(`quant.calibrated_scale`), so the last-bit differences of numpy's SIMD kernels between
CPUs do not reach a scale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kernbench.compiler.inputs import default_inputs
from kernbench.compiler.kv_blocks import block_attention
from kernbench.compiler.state import CompileState
from kernbench.ir.interpreter import Interpreter
from kernbench.ir.model import Graph, LayerIR, QBits, QuantParams, TensorIR, is_shape_only
from kernbench.ir.ops import node_attrs
from kernbench.numerics import quant as qmath
from kernbench.numerics.wide import wide_floats

#: op → indices of inputs it quantizes with activation bits (a) or KV bits (kv)
TE_INPUTS = {
    "GEMM": ((0, "a"),),
    "QKV_PROJ": ((0, "a"),),
    "CONV": ((0, "a"),),
    "ATTENTION": ((0, "a"), (1, "kv"), (2, "kv")),
    "MATMUL": ((0, "a"), (1, "a")),   # both activations (compiler/lower/bmm.py)
}


def _bits(v: QBits) -> int | None:
    return v if isinstance(v, int) else None


def int8_dequant_source(g: Graph, tid: str) -> tuple[str, str] | None:
    """(int8 source, scale id) when `tid` = DEQUANTIZE(int8 x, per-tensor scale, zp 0)."""
    t = g.tensors[tid]
    if t.producer is None:
        return None
    n = g.node(t.producer)
    if n.op_type != "DEQUANTIZE" or len(n.inputs) < 2:
        return None
    src, scale = n.inputs[0], n.inputs[1]
    if g.tensors[src].dtype != "int8" or not g.tensors[scale].const:
        return None
    if int(np.asarray(g.weights[scale]).size) != 1:
        return None
    if len(n.inputs) > 2 and n.inputs[2] and np.any(np.asarray(g.weights[n.inputs[2]]) != 0):
        return None
    return src, scale


def wanted_scales(g: Graph) -> dict[str, int]:
    """Activation → bits, for every non-constant input a TE layer quantizes and that has no
    static scale yet (K/V only when the activations are integer too, as the interpreter)."""
    want: dict[str, int] = {}
    for n in g.nodes:
        for idx, kind in TE_INPUTS.get(n.op_type, ()):
            bits = _bits(n.qbits_activation if kind == "a" else n.qbits_kv)
            if idx >= len(n.inputs) or bits is None:
                continue
            tid = n.inputs[idx]
            t = g.tensors[tid]
            if t.quant is not None or t.const:
                continue
            if kind == "kv" and _bits(n.qbits_activation) is None:
                continue  # the interpreter quantizes K/V only when A is integer too
            want.setdefault(tid, bits)
    return want


def kv_caches(g: Graph) -> dict[str, tuple[int, str, str]]:
    """Present KV caches stored at KV bits (16, 8 or 4: int16, int8, or int4 packed two
    values a byte): output → (bits, past, new)."""
    kv_out: dict[str, tuple[int, str, str]] = {}
    for n in g.nodes:
        bits = _bits(n.qbits_kv)
        if n.op_type == "KV_UPDATE" and bits in (4, 8, 16) and g.tensors[n.outputs[0]].quant \
                is None and g.tensors[n.outputs[0]].dtype == "fp32":
            kv_out[n.outputs[0]] = (bits, n.inputs[0], n.inputs[1])
    return kv_out


def qdq_source(g: Graph, tid: str) -> LayerIR | None:
    """The QDQ layer that produced `tid` when it is a per-tensor 8-bit fake quantization
    with constant scale and zero point (int8 or uint8, any zero point), else None."""
    t = g.tensors[tid]
    if t.producer is None:
        return None
    n = g.node(t.producer)
    if n.op_type != "QDQ" or len(n.inputs) < 2:
        return None
    a = node_attrs(n)
    if a.axis is not None or a.block_size or a.dtype not in ("int8", "uint8"):
        return None
    consts = [x for x in n.inputs[1:3] if x]
    if not all(g.tensors[x].const and np.asarray(g.weights[x]).size == 1 for x in consts):
        return None
    return n


def adopt_qdq_activations(g: Graph) -> int:
    """A GEMM / QKV_PROJ with an integer (imported) weight whose activation comes from a
    QDQ computes in integers with the QDQ's own quantization: the layer gets activation
    bits 8 and the tensor the QDQ's static (scale, zero point). The interpreter then runs
    the integer GEMM with the zero point (the same values onnxruntime's QDQ graph
    multiplies, in exact integer arithmetic), and the tiles compile it.
    Returns the number of layers adopted."""
    count = 0
    for n in g.nodes:
        if n.op_type not in ("GEMM", "QKV_PROJ") or n.qbits_activation not in (None, 8) \
                or not isinstance(n.qbits_weight, int):
            continue
        q = qdq_source(g, n.inputs[0])
        t = g.tensors[n.inputs[0]]
        if q is None or t.quant is not None and t.quant.scale != q.inputs[1]:
            continue
        zp = q.inputs[2] if len(q.inputs) > 2 and q.inputs[2] else None
        t.quant = QuantParams(scale=q.inputs[1], zero_point=zp, dtype=node_attrs(q).dtype)
        n.qbits_activation = 8
        count += 1
    return count


def _set_scale(g: Graph, tid: str, sid: str, scale: np.ndarray, bits: int) -> None:
    """Store `scale` as constant `sid` and make it `tid`'s static per-tensor scale."""
    g.weights[sid] = np.asarray(scale, dtype=np.float32).reshape(())
    g.tensors[sid] = TensorIR(id=sid, shape=[], dtype="fp32", role="weight", const=True)
    g.tensors[tid].quant = QuantParams(scale=sid, dtype=f"int{bits}")


@dataclass(frozen=True)
class QuantizeActivations:
    """Give every activation a TE layer quantizes a static scale (calibrated or adopted
    from a QDQ); then block the attention layers whose K / V do not fit a TCM bank along
    the KV sequence (`kv_blocks`), which changes their numerics like a scale does."""

    name: str = "quantize"
    changes_ir: ClassVar[bool] = True
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        state = self._scales(state)
        blocked = block_attention(state)
        if blocked:
            state.notes.append(f"quantize: {blocked} attention layers blocked along the KV "
                               "sequence or split over PEs (online softmax)")
        return state

    def _scales(self, state: CompileState) -> CompileState:
        g = state.graph
        adopted = adopt_qdq_activations(g)
        if adopted:
            state.notes.append(f"quantize: {adopted} GEMMs take their QDQ activation's "
                               "quantization (integer, with zero points)")
        want = wanted_scales(g)
        kv_out = kv_caches(g)
        for tid in kv_out:
            want.pop(tid, None)
        # an activation that is the per-tensor dequantization of an int8 tensor is already
        # quantized: its scale is the DequantizeLinear scale (the TE reads the int8 data)
        for tid in sorted(want):
            dq = int8_dequant_source(g, tid)
            if dq is not None:
                g.tensors[tid].quant = QuantParams(scale=dq[1], dtype="int8")
                del want[tid]
        if not want and not kv_out:
            return state
        if is_shape_only(g):  # no values to calibrate on: the QConfig bits, unit scales
            return _unit_scales(state, want, kv_out)
        need = set(want) | {t for _, past, new in kv_out.values() for t in (past, new)}
        values = _calibrate(state, need)
        for tid in sorted(want):
            _set_scale(g, tid, f"{tid}::act_scale",
                       qmath.calibrated_scale(values[tid], want[tid]), want[tid])
        for tid in sorted(kv_out):
            # the cache is stored at kv bits: calibrate on the value before quantization
            bits, past, new = kv_out[tid]
            axis = node_attrs(g.node(g.tensors[tid].producer)).axis
            x = np.concatenate([np.asarray(values[past], np.float64),
                                np.asarray(values[new], np.float64)], axis=axis)
            _set_scale(g, tid, f"{tid}::kv_scale", qmath.calibrated_scale(x, bits), bits)
        g.rebuild_links()
        state.notes.append(f"quantize: static scales for {len(want)} activations, "
                           f"{len(kv_out)} KV caches stored at KV bits")
        return state


def _calibrate(state: CompileState, need: set[str]) -> dict[str, np.ndarray]:
    """The values of tensors `need` when the reference interpreter runs the graph on the
    calibration inputs. Memoized in `state.options.calibration` (when it is a dict) by the
    graph's content (its IR JSON and the identity of its weight arrays) and the inputs: the
    compiles of one graph for several PE subsets reach this pass with equal graphs and run
    the interpreter once."""
    g = state.graph
    opts = state.options
    if opts.calibration is None:
        return _pick(_forward(g, opts), need)
    key = (json.dumps(g.to_dict(), sort_keys=True),
           tuple(sorted((k, id(v)) for k, v in g.weights.items())),
           opts.seed, id(opts.calib_inputs), tuple(sorted(need)))
    hit = opts.calibration.get(key)
    if hit is None:
        hit = _pick(_forward(g, opts), need)
        opts.calibration.clear()  # one graph at a time: the memo never grows
        opts.calibration[key] = hit
    return hit


def _pick(values: dict[str, np.ndarray], need: set[str]) -> dict[str, np.ndarray]:
    return {t: values[t] for t in need}


def _forward(g: Graph, opts) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Every tensor's value when the reference interpreter runs `g` on the calibration
    inputs with its float kernels in float64 (numerics.wide): the values, and so the
    scales, are the same on every CPU."""
    feeds = opts.calib_inputs or default_inputs(g, opts.seed)
    with wide_floats():
        _, values = Interpreter(g).run(feeds, keep_all=True)
    return values


def _unit_scales(state: CompileState, want: dict[str, int],
                 kv_out: dict[str, tuple[int, str, str]]) -> CompileState:
    """A shape-only graph (no weight values): every wanted scale is 1 (timing only)."""
    g = state.graph
    for tid in sorted(want):
        _set_scale(g, tid, f"{tid}::act_scale", np.float32(1.0), want[tid])
    for tid in sorted(kv_out):
        _set_scale(g, tid, f"{tid}::kv_scale", np.float32(1.0), kv_out[tid][0])
    g.rebuild_links()
    state.notes.append(f"quantize: shape-only model, unit scales for {len(want)} activations "
                       f"and {len(kv_out)} KV caches")
    return state
