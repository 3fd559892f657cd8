"""The reference interpreter: runs an IR Graph with the numerics kernels.

Quantization semantics, applied when `quantize=True` (the default) from each
layer's qbits annotations; the math is `kernbench.numerics` (quant, linalg, attention):

- TE layers (GEMM, QKV_PROJ, CONV, MATMUL, ATTENTION) with integer qbits quantize their
  activation inputs (per tensor, symmetric; static scale if the tensor carries `quant`,
  else dynamic) and their weights (symmetric per output channel, or the imported integer
  data), multiply in exact integer arithmetic (int32 accumulators) and dequantize the
  accumulator in the epilogue (acc * s_x * s_w + bias).
- ATTENTION quantizes Q to qbits_activation and K / V to qbits_kv; KV_UPDATE stores the
  cache in qbits_kv.
- VE layers (norms, softmax, activations, elementwise) compute in fp32 on dequantized
  inputs; with fp16 / bf16 annotations their outputs are rounded to that precision.

Each node runs as `prepare(interp, node)` → LayerCall (a numerics kernel name and plain
params, kernbench.ir.interpreter.params) then `numerics.layers.run_layer`; the data pass
of the simulator runs the very same LayerCall on the values it reads from memory.
`run(..., keep_all=True)` also returns every tensor's value, so callers can find the first
layer where two executions diverge (`layer_outputs`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kernbench.errors import InputError
from kernbench.ir.interpreter.params import LayerCall, prepare
from kernbench.ir.model import Graph, LayerIR, QBits, TensorIR
from kernbench.numerics import quant as qmath
from kernbench.numerics.dtypes import np_dtype
from kernbench.numerics.errors import KernelError
from kernbench.numerics.layers import run_layer
from kernbench.numerics.wide import is_wide


class Interpreter:
    """Runs a Graph; also the quantization state (calibrated scales, bits, constants)
    the IR-side `prepare` functions read."""

    def __init__(self, graph: Graph, *, quantize: bool = True) -> None:
        self.g = graph
        self.quantize = quantize
        self._const_cache: dict[str, np.ndarray] = {}
        qc = graph.qconfig or {}
        self.per_channel = qc.get("weight_granularity", "per_channel") == "per_channel"

    # ------------------------------------------------------------ values
    def const_value(self, tid: str) -> np.ndarray:
        """The real value of a constant (dequantized if it holds integers)."""
        v = self._const_cache.get(tid)
        if v is None:
            t = self.g.tensors[tid]
            if tid not in self.g.weights:
                raise InputError("constant has no data (weights.npz missing?)", where=f"tensor {tid}")
            raw = self.g.weights[tid]
            v = self.dequant_const(t, raw) if t.quant is not None else raw
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
            ins = [None if not tid else env[tid] if tid in env else self.const_value(tid)
                   for tid in node.inputs]
            outs = self.call(node, ins)
            for tid, val in zip(node.outputs, outs, strict=False):
                if tid:
                    env[tid] = self.stored(tid, val)
        outs = {o: env[o] if o in env else self.const_value(o) for o in self.g.outputs}
        if keep_all:
            return outs, env
        return outs

    def call(self, node: LayerIR, ins: list[Any]) -> list[np.ndarray]:
        """The outputs of `node` on input values `ins` (one numerics kernel call)."""
        return run_call(prepare(self, node), node, ins)

    def stored(self, tid: str, val: npt.ArrayLike) -> np.ndarray:
        """A layer output as the IR types it (a quantized tensor keeps the kernel's dtype,
        but a float value is rounded to the tensor's float dtype as memory holds it: an
        fp16 activation with a static scale is stored in fp16, then quantized). Inside
        numerics.wide.wide_floats an fp32 tensor keeps the kernel's float64."""
        val = np.asarray(val)
        want = self.out_dtype(tid)
        if want is None and val.dtype.kind == "f":
            fdt = np_dtype(self.g.tensors[tid].dtype)
            want = fdt if fdt.kind in "fV" else None
        if want == np.float32 and val.dtype == np.float64 and is_wide():
            return val
        return val.astype(want) if want is not None and val.dtype != want else val

    def out_dtype(self, tid: str) -> np.dtype | None:
        t = self.g.tensors[tid]
        return np_dtype(t.dtype) if t.quant is None else None

    # ------------------------------------------------------------ quant state
    def qa(self, node: LayerIR) -> Any:
        return node.qbits_activation if self.quantize else None

    def qw(self, node: LayerIR) -> Any:
        return node.qbits_weight if self.quantize else None

    def qkv(self, node: LayerIR) -> Any:
        return node.qbits_kv if self.quantize else None

    def static_act(self, tid: str, bits: QBits) -> dict[str, Any] | None:
        """The static per-tensor quantization of activation `tid` at `bits`, if the IR
        gives one ({"scale", "zero_point", "signed"}); None: quantize dynamically."""
        t = self.g.tensors.get(tid)
        if not isinstance(bits, int) or t is None or t.quant is None or t.quant.axis is not None:
            return None
        qd = t.quant.dtype
        if int(qd.lstrip("uint")) != bits:
            return None
        zp = self.g.weights[t.quant.zero_point] if t.quant.zero_point else 0
        return {"scale": self.g.weights[t.quant.scale], "zero_point": zp,
                "signed": not qd.startswith("u")}

    def weight_quant(self, tid: str) -> dict[str, Any] | None:
        """The imported integer data of weight `tid` ({"q", "scale", "zero_point", "axis",
        "block_size"}), or None when the weight is real-valued."""
        t = self.g.tensors.get(tid)
        if t is None or t.quant is None:
            return None
        q = t.quant
        return {"q": self.g.weights[tid], "scale": self.g.weights[q.scale],
                "zero_point": self.g.weights[q.zero_point] if q.zero_point else 0,
                "axis": q.axis, "block_size": q.block_size}


def run_call(call: LayerCall, node: LayerIR, ins: list[Any]) -> list[np.ndarray]:
    """Run a prepared call; a kernel's refusal becomes an InputError naming the node."""
    try:
        return run_layer(call.kernel, ins, call.params)
    except KernelError as e:
        raise InputError(str(e), where=f"node {node.id}") from None


def run(graph: Graph, feeds: dict[str, np.ndarray], *, quantize: bool = True,
        keep_all: bool = False) -> Any:  # fmt: skip
    """Run `graph` on `feeds`; returns {output id: array} (and all values if keep_all)."""
    return Interpreter(graph, quantize=quantize).run(feeds, keep_all=keep_all)


def layer_outputs(graph: Graph, values: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """{layer id: [output arrays]} from the `keep_all` values of a run, in node order."""
    return {n.id: [values[o] for o in n.outputs if o in values] for n in graph.nodes}
