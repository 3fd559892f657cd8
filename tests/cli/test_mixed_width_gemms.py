"""GEMMs with fp16 / bf16 weights and 8- or 16-bit integer activations are tiled (issue
36, ADR-0948): the activation is quantized and dequantized into an fp32 scratch (the
values the interpreter multiplies), the weight is stored rounded to its 16-bit format and
the TE tiles multiply fp32 × 16-bit float into fp32, instead of running every GEMM and
QKV projection whole on one PE; `--verify` passes against the interpreter and
onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

MODELS = Path(__file__).resolve().parents[2] / "tests" / "models"


@pytest.mark.parametrize(("model", "default"), [
    ("gpt2", "{weight: bf16, activation: 8, kv: 8}"),
    ("llama", "{weight: fp16, activation: 8, kv: 8}"),
    ("llama", "{weight: bf16, activation: 16, kv: 16}"),
])
def test_float_weight_integer_activation_gemms_are_tiled(tmp_path, capsys, model, default):
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    out = tmp_path / "o"
    code = main(["run", str(MODELS / f"{model}.onnx"), "--inputs",
                 str(MODELS / f"{model}.inputs.npz"), "--qconfig", str(q), "--verify",
                 "--quiet", "--keep-bundle", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "whole-layer ops" not in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] in ("TE_LAYER_OP", "VE_LAYER_OP")]
    fmt = "bf16" if "bf16" in default else "fp16"
    gemm = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"
            and (e.get("layer_id") or "").startswith(("gemm", "qkv"))]
    assert gemm and all(e["qbits_activation"] == 32 and e["qbits_weight"] == 16
                        and e.get("f16_format", "fp16") == fmt for e in gemm)
    v = json.loads((out / "verification.json").read_text())
    checks = v["checks"]
    assert v["ok"] and {c["reference"] for c in checks} == {"interpreter", "onnxruntime"}
    # the tiles sum K in another order than numpy: fp32 rounding, far below fp32 1e-5
    assert all(c["max_abs_err"] <= 1e-5 for c in checks if c["reference"] == "interpreter")
