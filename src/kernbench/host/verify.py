"""Numerical verification of a simulated bundle (ADR-0020 D11).

Two references for the simulated graph outputs:
(a) the IR reference interpreter on the compiled IR (same static scales, same quantized
    math): float outputs must be allclose at the D11 tolerance of the layers' compute
    type (fp32 1e-5, fp16 1e-3, bf16 1e-2), integer outputs equal;
(b) onnxruntime on the source model: max abs error and cosine similarity; quantized
    models pass at cosine ≥ 0.999, fp16 at max abs ≤ 1e-3, fp32 at max abs ≤ 1e-4.
When a check fails, every layer's stored outputs are compared with the interpreter's to
name the first layer that diverges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

COSINE_MIN = 0.999
ORT_MAX_ABS = {"fp16": 1e-3, "bf16": 1e-2, "fp32": 1e-4}
TOL = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-2}
QUANT_OPS = {"DYNAMIC_QUANTIZE", "MATMUL_INTEGER", "QLINEAR_MATMUL", "QUANTIZE", "DEQUANTIZE",
             "QDQ"}


def precision_mode(graph: Any) -> str:
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

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "mode": self.mode, "error": self.error,
                "checks": [c.__dict__ for c in self.checks],
                "first_divergence": self.first_divergence}


def onnxruntime_outputs(model: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, feeds), strict=True))


def verify_outputs(bundle: Any, outputs: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
                   store: Any, source_model: Path | None, data_error: str | None = None,
                   dump_intermediates: bool = False) -> Verdict:
    from kernbench.host.bundle import layer_divergence
    from kernbench.ir.interpreter import Interpreter
    from kernbench.numerics.compare import compare

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
    if source_model is not None and Path(source_model).exists():
        ort_out = onnxruntime_outputs(Path(source_model), inputs)
        for name in g.outputs:
            if name not in ort_out or name not in outputs:
                continue
            c = compare(outputs[name], ort_out[name])
            e, cos = c["max_abs_err"], c["cosine"]
            if mode == "quantized":
                ok, thr = cos >= COSINE_MIN, f"cosine >= {COSINE_MIN}"
            else:
                lim = ORT_MAX_ABS.get(mode, 1e-4)
                ok, thr = e <= lim, f"max abs <= {lim:g}"
            v.checks.append(Check(name, "onnxruntime", e, cos, thr, ok))
    if dump_intermediates or not v.ok:
        rows = layer_divergence(bundle, store, values)
        v.layers = rows
        bad = next((r for r in rows if not r["ok"]), None)
        v.first_divergence = bad
    return v


def print_verdict(v: Verdict, console: Any) -> None:
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
        console.print(f"all {len(v.layers)} layer outputs match the reference interpreter")
    console.print("[green]VERIFIED[/]" if v.ok else "[red]VERIFICATION FAILED[/]")
