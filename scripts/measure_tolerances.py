"""Measure the error of kernbench's numerics against onnxruntime, per precision mode.

For every committed test model (tests/models) and every QConfig precision mode, compile
the model (calibrated as a run calibrates) and run the IR reference interpreter on the
compiled IR — the data pass matches it bit for bit or within its documented bound, which
`--verify` checks separately — then compare with onnxruntime on the source model. Prints
a markdown table (model, mode, max abs error, max |reference|, cosine) and the worst
cosine per mode; docs/verification.md records the numbers and the tolerances chosen
from them (host/verify.py ORT_TOLERANCE).

    PYTHONPATH=src python scripts/measure_tolerances.py [--models gpt2,llama] [--modes W4A8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "models"
FLOAT_MODELS = ["gpt2", "gpt2_decode", "llama", "llama_decode", "llama_opset23", "bert"]
IMPORTED = ["gpt2_qdq", "llama_qdq", "bert_qdq", "bert_dynamic", "bert_qoperator",
            "llama_int4"]
MODES = {  # name -> QConfig default
    "fp32": "{weight: fp32, activation: fp32, kv: fp32}",
    "fp16": "{weight: fp16, activation: fp16, kv: fp16}",
    "bf16": "{weight: bf16, activation: bf16, kv: bf16}",
    "W8A8": "{weight: 8, activation: 8, kv: fp32}",
    "W8A8KV8": "{weight: 8, activation: 8, kv: 8}",
    "W4A8": "{weight: 4, activation: 8, kv: fp32}",
    "W8A8KV4": "{weight: 8, activation: 8, kv: 4}",
    "W4A8KV4": "{weight: 4, activation: 8, kv: 4}",
    # every other width the QConfig accepts, one field at a time (issue 36, ADR-0800)
    "W4A8KV8": "{weight: 4, activation: 8, kv: 8}",
    "W16A8KV8": "{weight: 16, activation: 8, kv: 8}",
    "W8A16KV8": "{weight: 8, activation: 16, kv: 8}",
    "W8A8KV16": "{weight: 8, activation: 8, kv: 16}",
    "W16A16KV16": "{weight: 16, activation: 16, kv: 16}",
    "W8A4KV8": "{weight: 8, activation: 4, kv: 8}",
    "W4A4KV4": "{weight: 4, activation: 4, kv: 4}",
    "W16A4KV8": "{weight: 16, activation: 4, kv: 8}",
    "Wfp16A8KV8": "{weight: fp16, activation: 8, kv: 8}",
    "Wbf16A8KV8": "{weight: bf16, activation: 8, kv: 8}",
    "W8Afp16KV8": "{weight: 8, activation: fp16, kv: 8}",
    "W8A8KVfp16": "{weight: 8, activation: 8, kv: fp16}",
    "W8A8KVbf16": "{weight: 8, activation: 8, kv: bf16}",
}


def measure(model: str, qdefault: str | None) -> tuple[str, float, float, float]:
    from kernbench.host.flow import CompileRequest, compile_model, load_inputs
    from kernbench.host.verify import onnxruntime_outputs, ort_mode
    from kernbench.ir.interpreter import Interpreter
    from kernbench.numerics.compare import compare
    from kernbench.topology import load_topology

    src = MODELS / f"{model}.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        q = None
        if qdefault is not None:
            q = Path(tmp) / "q.yaml"
            q.write_text(f"default: {qdefault}\n")
        inputs = MODELS / f"{model}.inputs.npz"
        state, _ = compile_model(src, load_topology("small"), Path(tmp) / "b",
                                 CompileRequest(qconfig=q, calib_inputs=inputs))
        g = state.graph
        feeds = load_inputs(inputs, g)
        ref = Interpreter(g).run(feeds)
        ort = onnxruntime_outputs(src, feeds) or {}
        worst = (0.0, 0.0, 1.0)
        for name in g.outputs:
            if name not in ort:
                continue
            c = compare(np.asarray(ref[name]), ort[name])
            scale = float(np.max(np.abs(ort[name]))) if ort[name].size else 0.0
            if c["cosine"] < worst[2] or c["max_abs_err"] > worst[0]:
                worst = (max(worst[0], c["max_abs_err"]), max(worst[1], scale),
                         min(worst[2], c["cosine"]))
        return (ort_mode(g), *worst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(FLOAT_MODELS + IMPORTED))
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    print("| model | qconfig | mode | max abs err | max abs ref | cosine |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    worst: dict[str, float] = {}
    for m in a.models.split(","):
        modes = a.modes.split(",") if m in FLOAT_MODELS else ["imported"]
        for mode in modes:
            got = measure(m, MODES.get(mode))
            worst[got[0]] = min(worst.get(got[0], 1.0), got[3])
            print(f"| {m} | {mode} | {got[0]} | {got[1]:.3g} | {got[2]:.3g} | {got[3]:.6f} |")
            sys.stdout.flush()
    print()
    for k, v in sorted(worst.items()):
        print(f"worst cosine {k}: {v:.6f}")


if __name__ == "__main__":
    main()
