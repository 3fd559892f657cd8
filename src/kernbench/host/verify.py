"""Numerical verification of a simulated bundle.

Two references for the simulated graph outputs:
(a) the IR reference interpreter on the compiled IR (same static scales, same quantized
    math): float outputs must be allclose at the D11 tolerance of the layers' compute
    type (fp32 1e-5, fp16 1e-3, bf16 1e-2), integer outputs equal;
(b) onnxruntime on the source model: max abs error and cosine similarity, with a
    tolerance per precision mode (ort_mode: fp32, fp16, bf16, W8A8, W4A8, W8A8KV4, ...,
    qdq, dynamic, qoperator) measured on the committed test models
    (scripts/measure_tolerances.py) and documented in docs/verification.md. Without the
    source model (a bundle compiled from ir.json) this check is skipped, and said so.
When a check fails, every layer's stored outputs are compared with the interpreter's to
name the first layer that diverges. With `--dump-intermediates` (the data pass's debug mode)
each layer output is read at the op boundary where it is complete (host.intermediates),
and every row goes to verification.json (`intermediates`); without it, a failed check
reads the layer outputs from the final memory (`first_divergence` then says so: a region
reused by a later layer shows the later layer's data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernbench.errors import warn
from kernbench.host.bundle import Bundle, layer_divergence
from kernbench.host.intermediates import BoundaryCapture
from kernbench.ir.interpreter import Interpreter
from kernbench.ir.model import Graph
from kernbench.numerics.compare import compare
from kernbench.sim_engine.memory_store import MemoryStore

if TYPE_CHECKING:  # rich is imported where a table is printed
    from rich.console import Console

# Tolerance against onnxruntime per precision mode, chosen from the errors measured on the
# committed test models (scripts/measure_tolerances.py; table in docs/verification.md).
ORT_TOLERANCE: dict[str, tuple[str, float]] = {
    "fp32": ("max_abs", 1e-4), "fp16": ("max_abs", 5e-3), "bf16": ("max_abs", 3e-2),
    "W8A8": ("cosine", 0.999), "W8A8KV8": ("cosine", 0.999), "W8A8KV4": ("cosine", 0.97),
    "W4A8": ("cosine", 0.97), "W4A8KV8": ("cosine", 0.97), "W4A8KV4": ("cosine", 0.96),
    "qdq": ("cosine", 0.999), "qdq-int4": ("cosine", 0.999), "dynamic": ("cosine", 0.999),
    "qoperator": ("cosine", 0.999),
    # the other widths the QConfig accepts (2-bit is refused)
    "W16A16KV16": ("cosine", 0.9999), "W16A8KV8": ("cosine", 0.999),
    "W8A16KV8": ("cosine", 0.999), "W8A8KV16": ("cosine", 0.999),
    "W8A4KV8": ("cosine", 0.90), "W4A4KV4": ("cosine", 0.90),
    # block-float weights (any activation / KV width), by the narrowest format
    "BFP8": ("cosine", 0.999), "BFP4": ("cosine", 0.97),
}
TOL = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-2}
QUANT_OPS = {"DYNAMIC_QUANTIZE", "MATMUL_INTEGER", "QLINEAR_MATMUL", "QUANTIZE", "DEQUANTIZE",
             "QDQ", "QLINEAR_CONV", "CONV_INTEGER"}


IMPORTED_MODES = (("QLINEAR_MATMUL", "qoperator"), ("QLINEAR_CONV", "qoperator"),
                  ("MATMUL_INTEGER", "dynamic"), ("CONV_INTEGER", "dynamic"),
                  ("DYNAMIC_QUANTIZE", "dynamic"))


def ort_mode(graph: Graph) -> str:
    """The precision mode that sets the tolerance against onnxruntime: fp32 / fp16 / bf16,
    W{w}A{a}[KV{kv}] from the QConfig bits (e.g. W8A8, W4A8, W8A8KV4), or for a model
    that was quantized before import: qoperator, dynamic, qdq (qdq-int4 with 4-bit
    weights); BFP8 / BFP4 when weights are block floats, by the narrowest."""
    ops = {n.op_type for n in graph.nodes}
    for op, name in IMPORTED_MODES:
        if op in ops:
            return name
    if ops & {"QDQ", "QUANTIZE", "DEQUANTIZE"} or any(n.metadata.get("imported_qbits")
                                                       for n in graph.nodes):
        four = any(t.quant is not None and t.qbits in (4, 2) for t in graph.tensors.values())
        return "qdq-int4" if four else "qdq"
    bfp = {n.qbits_weight for n in graph.nodes} & {"bfp8_b", "bfp4_b"}
    if bfp:
        return "BFP4" if "bfp4_b" in bfp else "BFP8"

    def lowest(field: str) -> int | None:
        bits = [getattr(n, field) for n in graph.nodes]
        ints = [b for b in bits if isinstance(b, int)]
        return min(ints) if ints else None

    w, a, kv = lowest("qbits_weight"), lowest("qbits_activation"), lowest("qbits_kv")
    if w is None and a is None and kv is None:
        return precision_mode(graph)
    return ((f"W{w}" if w else "") + (f"A{a}" if a else "") + (f"KV{kv}" if kv else ""))


def ort_tolerance(mode: str) -> tuple[str, float]:
    """("max_abs", limit) or ("cosine", minimum) for an ort_mode (docs/verification.md);
    a combination not in the table takes the tolerance of its narrowest width."""
    if mode in ORT_TOLERANCE:
        return ORT_TOLERANCE[mode]
    if "A4" in mode:  # 4-bit activations: the loosest measured mode
        return ORT_TOLERANCE["W8A4KV8"]
    if "4" in mode.replace("A8", "") or "2" in mode:
        return ORT_TOLERANCE["W4A8KV4"]
    return ORT_TOLERANCE["W8A8KV8"]


def precision_mode(graph: Graph) -> str:
    """'quantized' if any layer computes with integer bits, else fp16 / bf16 / fp32."""
    modes = set()
    for n in graph.nodes:
        if n.op_type in QUANT_OPS:  # imported quantization (dynamic, QOperator, QDQ)
            modes.add("quantized")
        for b in (n.qbits_weight, n.qbits_activation, n.qbits_kv):
            if isinstance(b, int):
                modes.add("quantized")
            elif b in ("fp16", "bf16"):
                modes.add(b)
    for t in graph.tensors.values():
        if t.quant is not None:
            modes.add("quantized")
    for m in ("quantized", "bf16", "fp16"):
        if m in modes:
            return m
    return "fp32"


@dataclass
class Check:
    output: str
    reference: str
    max_abs_err: float
    cosine: float
    threshold: str
    ok: bool


@dataclass
class Verdict:
    mode: str
    checks: list[Check] = field(default_factory=list)
    first_divergence: dict[str, Any] | None = None
    layers: list[dict[str, Any]] | None = None
    error: str | None = None
    # where the layer rows were read: "op boundary" (--dump-intermediates) or "final memory"
    layers_read_at: str | None = None

    def lines(self) -> list[str]:
        """The verdict as summary lines (stdout, summary.txt)."""
        out = ["verification: " + ("PASS" if self.ok else "FAIL")]
        for c in self.checks:
            out.append(f"  {c.output} vs {c.reference}: max abs {c.max_abs_err:.3g}, "
                       f"cosine {c.cosine:.6f} ({c.threshold}) {'ok' if c.ok else 'FAIL'}")
        if self.first_divergence:
            out.append(f"  first diverging layer: {self.first_divergence['layer']}")
        return out

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, "mode": self.mode, "error": self.error,
               "checks": [c.__dict__ for c in self.checks],
               "first_divergence": self.first_divergence}
        if self.layers_read_at == "op boundary":  # --dump-intermediates: every row
            out["intermediates"] = self.layers
        return out


def onnxruntime_outputs(model: Path, inputs: dict[str, np.ndarray]
                        ) -> dict[str, np.ndarray] | None:  # fmt: skip
    """onnxruntime's outputs of `model` (CPU, graph optimizations off); None (with a
    warning) when onnxruntime has no CPU kernel for one of its ops at its types, e.g. most
    bf16 ops: the model is then checked against the IR interpreter only."""
    import onnxruntime as ort  # heavy, optional: only --verify with a source model
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtMissing

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    import onnx  # heavy, optional: only a run with --verify and a source model needs it

    src: Any = str(model)
    m = onnx.load(src, load_external_data=False)
    if any(onnx.external_data_helper.uses_external_data(t)
           for t in onnx.external_data_helper._get_all_tensors(m)):
        # onnxruntime cannot shape-infer through external initializers (a Reshape's
        # shape): hand it the model with the data inlined when it fits in one protobuf
        onnx.external_data_helper.load_external_data_for_model(m, str(Path(model).parent))
        if m.ByteSize() < 2**31 - 1:
            src = m.SerializeToString()
    try:
        sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    except OrtMissing as e:
        warn(f"verify: onnxruntime cannot run {Path(model).name} "
             f"({' '.join(str(e).split())[-160:]}): checked against the IR interpreter only")
        return None
    names = [o.name for o in sess.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, feeds), strict=True))


def verify_outputs(bundle: Bundle, outputs: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
                   store: MemoryStore, source_model: Path | None, data_error: str | None = None,
                   intermediates: BoundaryCapture | None = None) -> Verdict:
    """The verdict on a data pass's `outputs` (module docstring); `intermediates`: the
    host.intermediates.BoundaryCapture of the data pass (--dump-intermediates) or None."""

    g = bundle.graph
    mode = precision_mode(g)
    v = Verdict(mode, error=data_error)
    ref, values = Interpreter(g).run(inputs, keep_all=True)
    tol = TOL.get(mode, 1e-5)
    for name in g.outputs:
        got, exp = outputs.get(name), np.asarray(ref[name])
        if got is None:
            v.checks.append(Check(name, "interpreter", float("inf"), 0.0, "present", False))
            continue
        exact = exp.dtype.kind in "iub"
        c = compare(got, exp, tol=None if exact else tol)
        v.checks.append(Check(name, "interpreter", c["max_abs_err"], c["cosine"],
                              "exact" if exact else f"allclose {tol:g}", c["allclose"]))
    if source_model is None or not Path(source_model).exists():
        warn("verify: the bundle has no model.onnx: checked against the IR reference "
             "interpreter only (onnxruntime skipped)")
    else:
        ort_out = onnxruntime_outputs(Path(source_model), inputs) or {}
        for name in g.outputs:
            if name not in ort_out or name not in outputs:
                continue
            c = compare(outputs[name], ort_out[name])
            e, cos = c["max_abs_err"], c["cosine"]
            omode = ort_mode(g)
            kind, lim = ort_tolerance(omode)
            if kind == "cosine":
                ok, thr = cos >= lim, f"cosine >= {lim:g} ({omode})"
            else:
                ok, thr = e <= lim, f"max abs <= {lim:g} ({omode})"
            v.checks.append(Check(name, "onnxruntime", e, cos, thr, ok))
    if intermediates is not None or not v.ok:
        if intermediates is not None:
            rows, v.layers_read_at = intermediates.rows(bundle, values), "op boundary"
        else:
            rows, v.layers_read_at = layer_divergence(bundle, store, values), "final memory"
        v.layers = rows
        bad = next((r for r in rows if not r["ok"]), None)
        v.first_divergence = None if bad is None else {**bad, "read_at": v.layers_read_at}
    return v


def print_verdict(v: Verdict, console: Console) -> None:
    from rich.table import Table

    t = Table(title=f"verification ({v.mode})")
    for col in ("output", "reference", "max abs err", "cosine", "threshold", "verdict"):
        t.add_column(col)
    for c in v.checks:
        t.add_row(c.output, c.reference, f"{c.max_abs_err:.3g}", f"{c.cosine:.6f}", c.threshold,
                  "[green]pass[/]" if c.ok else "[red]FAIL[/]")
    console.print(t)
    if v.error:
        console.print(f"[red]data pass error[/]: {v.error}")
    if v.first_divergence is not None:
        d = v.first_divergence
        console.print(f"[red]first diverging layer[/]: {d['layer']} ({d['op_type']}) output "
                      f"'{d['tensor']}': max abs err {d['max_abs_err']:.3g}, "
                      f"cosine {d['cosine']:.6f}")
    elif v.layers is not None:
        console.print(f"all {len(v.layers)} layer outputs match the reference interpreter "
                      f"(read at each {v.layers_read_at})")
    console.print("[green]VERIFIED[/]" if v.ok else "[red]VERIFICATION FAILED[/]")
