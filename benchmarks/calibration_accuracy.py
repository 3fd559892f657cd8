"""What snapping calibrated activation scales to 16 significant bits costs in accuracy
(ADR-0940): every calibrated W8A8 case of the golden set run with `--verify`, its logits
against onnxruntime, with the scales as compiled (16 bits, rounded up) and unsnapped
(the float64 range / qmax rounded once to float32).

Run:  .venv/bin/python benchmarks/calibration_accuracy.py
"""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kernbench.cli import main as cli
from kernbench.numerics import quant

ROOT = Path(__file__).resolve().parents[1]
CASES = [["gpt2", "--seq-len", "8"], ["gpt2", "--kv-len", "16"],
         ["llama", "--seq-len", "8"], ["llama", "--kv-len", "16"],
         [str(ROOT / "tests/models/gpt2.onnx")], [str(ROOT / "tests/models/llama.onnx")],
         [str(ROOT / "tests/models/gpt2_decode.onnx")]]


def ort_check(argv: list[str]) -> dict:
    """The first onnxruntime check of `kernbench run ARGV --verify`."""
    with tempfile.TemporaryDirectory() as tmp:
        sink = io.StringIO()
        with redirect_stdout(sink), redirect_stderr(sink):
            code = cli(["run", *argv, "--verify", "-o", str(Path(tmp) / "out")])
        v = json.loads((Path(tmp) / "out" / "verification.json").read_text())
    c = next(c for c in v["checks"] if c["reference"] == "onnxruntime")
    return {**c, "exit": code}


def main() -> None:
    print("| case | output | mantissa bits | cosine vs onnxruntime | max abs err | threshold "
          "| ok |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    default = quant.CALIB_MANTISSA_BITS
    for argv in CASES:
        name = " ".join(Path(a).name if a.endswith(".onnx") else a for a in argv)
        for bits in (default, 53):
            quant.CALIB_MANTISSA_BITS = bits
            c = ort_check(argv)
            print(f"| {name} | {c['output']} | {bits if bits != 53 else 'unsnapped'} | "
                  f"{c['cosine']:.6f} | {c['max_abs_err']:.4g} | {c['threshold']} | "
                  f"{c['ok']} |", flush=True)
    quant.CALIB_MANTISSA_BITS = default


if __name__ == "__main__":
    main()
