"""Static QDQ with asymmetric activations (onnxruntime's quantize_static, tests/zoo): the
GEMMs compile to tiles with the zero point folded into the TE's int32 bias, the QDQs run
in row blocks, and the run is exact against the interpreter (ADR-0704)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.report.layer_ops import layer_op_census, layer_op_census_of_bundle

ZOO = Path(__file__).resolve().parents[1] / "zoo"


@pytest.mark.parametrize("model", ["bert_qdq_static", "gpt2_qdq_static"])
def test_qdq_static_gemms_are_tiled_and_exact(tmp_path, capsys, model):
    out = tmp_path / "out"
    code = main(["run", str(ZOO / f"{model}.onnx"), "--inputs", str(ZOO / f"{model}.inputs.npz"),
                 "--verify", "--keep-bundle", "--out", str(out), "--no-trace", "--no-report",
                 "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    checks = json.loads((out / "verification.json").read_text())["checks"]
    assert all(c["ok"] for c in checks)
    assert all(c["max_abs_err"] == 0 for c in checks if c["reference"] == "interpreter")
    census = layer_op_census_of_bundle(out / "bundle")
    assert not [x for x in census.layers if x.startswith(("gemm", "qkv_proj"))]
    assert census.share < 0.03  # was 12.6% / 19.4% with every GEMM and QDQ whole
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    biased = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE" and "bias_bank" in e]
    assert biased and not any(e.get("accumulate") for e in biased)  # first K step only


def test_census_counts_whole_layer_ops():
    c = layer_op_census([{"opcode": "TE_GEMM_TILE", "layer_id": "g"},
                         {"opcode": "VE_LAYER_OP", "layer_id": "e", "op": "copy"},
                         {"opcode": "TE_LAYER_OP", "layer_id": "m"},
                         {"opcode": "END"}])
    assert (c.entries, c.whole, c.by_opcode) == (4, 2, {"TE_LAYER_OP": 1, "VE_LAYER_OP": 1})
    assert c.layers == {"e": "VE_LAYER_OP", "m": "TE_LAYER_OP"} and c.share == 0.5
