"""bf16 convolutions are tiled (issue 36, ADR-0949): dense CONVs as TE_CONV_TILEs and
depthwise ones as VE_DWCONV_TILEs reading bf16 operands (`f16_format: bf16`) into fp32,
not whole on one PE; the interpreter rounds a 16-bit float conv's operands as the
tiles do, so the data pass equals it, and onnxruntime agrees within the bf16 tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "tests" / "zoo"


@pytest.mark.parametrize(("model", "opcode"), [("resnet", "TE_CONV_TILE"),
                                               ("mobilenet", "VE_DWCONV_TILE")])
def test_bf16_convs_are_tiled_exactly(tmp_path, capsys, model, opcode):
    out = tmp_path / "o"
    code = main(["run", str(ZOO / f"{model}.onnx"), "--inputs",
                 str(ZOO / f"{model}.inputs.npz"), "--qconfig",
                 str(ROOT / "examples" / "qconfig" / "bf16.yaml"), "--verify", "--quiet",
                 "--keep-bundle", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "whole-layer ops" not in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] in ("TE_LAYER_OP", "VE_LAYER_OP")]
    conv = [e for e in cmdq if e["opcode"] == opcode]
    assert conv and all(e["qbits_activation"] == e["qbits_weight"] == 16
                        and e["f16_format"] == "bf16" for e in conv)
    v = json.loads((out / "verification.json").read_text())
    checks = v["checks"]
    assert v["ok"] and {c["reference"] for c in checks} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] <= 1e-5 for c in checks if c["reference"] == "interpreter")
