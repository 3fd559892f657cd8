"""Quantization annotation pass: static activation scales by calibration.

The reference interpreter quantizes an activation entering a TE layer with a dynamic
symmetric per-tensor scale (max|x| / qmax) unless the IR gives a static one. Hardware
cannot see the whole tensor before its first tile, so the compiler calibrates: it runs
the interpreter once on calibration inputs (seeded, valid for the model) and records,
for every activation a TE layer quantizes, the scale the dynamic run used, as a static
`QuantParams` on the tensor. On the calibration inputs the compiled model is then
bit-identical to the dynamic one; on other inputs it behaves as a statically calibrated
NPU does (values beyond the calibrated range saturate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench.compiler.state import CompileState
from kernbench.ir.model import QuantParams, is_shape_only
from kernbench.numerics import quant as qmath

#: op → indices of inputs it quantizes with activation bits (a) or KV bits (kv)
TE_INPUTS = {
    "GEMM": ((0, "a"),),
    "QKV_PROJ": ((0, "a"),),
    "ATTENTION": ((0, "a"), (1, "kv"), (2, "kv")),
}


def _bits(v) -> int | None:  # noqa: ANN001
    return v if isinstance(v, int) else None


def _int8_dequant_source(g, tid: str) -> tuple[str, str] | None:  # noqa: ANN001
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


@dataclass(frozen=True)
class QuantizeActivations:
    name: str = "quantize"

    def apply(self, state: CompileState) -> CompileState:
        from kernbench.compiler.inputs import default_inputs
        from kernbench.ir.interpreter import Interpreter

        g = state.graph  # a shape-only graph (no weight values) gets unit scales instead
        want: dict[str, int] = {}
        for n in g.nodes:
            spec = TE_INPUTS.get(n.op_type)
            if not spec:
                continue
            for idx, kind in spec:
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
        kv_out: dict[str, tuple[int, str, str]] = {}
        for n in g.nodes:
            bits = _bits(n.qbits_kv)
            if n.op_type == "KV_UPDATE" and bits == 8 and g.tensors[n.outputs[0]].quant \
                    is None and g.tensors[n.outputs[0]].dtype == "fp32":
                kv_out[n.outputs[0]] = (bits, n.inputs[0], n.inputs[1])
                want.pop(n.outputs[0], None)
        # an activation that is the per-tensor dequantization of an int8 tensor is already
        # quantized: its scale is the DequantizeLinear scale (the TE reads the int8 data)
        for tid in sorted(want):
            dq = _int8_dequant_source(g, tid)
            if dq is not None:
                src, scale_id = dq
                g.tensors[tid].quant = QuantParams(scale=scale_id, dtype="int8")
                del want[tid]
        if not want and not kv_out:
            return state
        if is_shape_only(g):  # no values to calibrate on: the QConfig bits, unit scales
            values = None
        else:
            feeds = state.options.calib_inputs or default_inputs(g, state.options.seed)
            _, values = Interpreter(g).run(feeds, keep_all=True)
        for tid in sorted(want):
            bits = want[tid]
            scale = (1.0 if values is None
                     else qmath.symmetric_scale(np.asarray(values[tid], np.float32), bits))
            sid = f"{tid}::act_scale"
            g.weights[sid] = np.asarray(scale, dtype=np.float32).reshape(())
            from kernbench.ir.model import TensorIR

            g.tensors[sid] = TensorIR(id=sid, shape=[], dtype="fp32", role="weight", const=True)
            g.tensors[tid].quant = QuantParams(scale=sid, dtype=f"int{bits}")
        for tid in sorted(kv_out):
            # the cache is stored at kv bits: calibrate on the value before quantization
            bits, past, new = kv_out[tid]
            axis = g.node(g.tensors[tid].producer).attributes.get("axis", 2)
            if values is None:
                kv_scale = 1.0
            else:
                x = np.concatenate([np.asarray(values[past], np.float32),
                                    np.asarray(values[new], np.float32)], axis=axis)
                kv_scale = qmath.symmetric_scale(x, bits)
            sid = f"{tid}::kv_scale"
            g.weights[sid] = np.asarray(kv_scale, np.float32).reshape(())
            from kernbench.ir.model import TensorIR

            g.tensors[sid] = TensorIR(id=sid, shape=[], dtype="fp32", role="weight", const=True)
            g.tensors[tid].quant = QuantParams(scale=sid, dtype=f"int{bits}")
        g.rebuild_links()
        state.notes.append(f"quantize: static scales for {len(want)} activations, "
                           f"{len(kv_out)} KV caches stored at KV bits")
        return state
