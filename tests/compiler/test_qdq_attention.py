"""QDQ attention (onnxruntime quantize_static exports, ADR-0821): Q, K and V each behind a
per-tensor 8-bit QDQ, QDQs on the scores and the probabilities. The importer recognises
it as one integer ATTENTION per layer (GQA kept: Llama's 4 query / 2 KV heads), which the
compiler tiles as fused attention; the run is exact against the interpreter and within
the qdq tolerance of onnxruntime."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.ir.onnx_import import import_onnx
from kernbench.report.layer_ops import layer_op_census_of_bundle

MODELS = Path(__file__).resolve().parents[1] / "models"
ZOO = MODELS.parent / "zoo"

#: model → (layers, query heads, KV heads)
CASES = {MODELS / "llama_qdq": (2, 4, 2), MODELS / "gpt2_qdq": (2, 4, 4),
         MODELS / "bert_qdq": (2, 4, 4), ZOO / "gpt2_qdq_static": (2, 4, 4),
         ZOO / "bert_qdq_static": (2, 4, 4)}


@pytest.mark.parametrize("model", list(CASES), ids=lambda p: p.name)
def test_one_integer_attention_per_layer(model):
    layers, hq, hkv = CASES[model]
    g = import_onnx(model.with_suffix(".onnx"))
    att = [n for n in g.nodes if n.op_type == "ATTENTION"]
    assert len(att) == layers
    assert all((n.attributes["num_heads"], n.attributes["num_kv_heads"]) == (hq, hkv)
               for n in att)
    assert all((n.qbits_activation, n.qbits_kv) == (8, 8) for n in att)
    ops = Counter(n.op_type for n in g.nodes)
    assert ops["SOFTMAX"] == 0
    # the attention matmuls are gone (a tied LM head may remain a MATMUL)
    assert ops["MATMUL"] <= 1


@pytest.mark.parametrize("model", [MODELS / "llama_qdq", ZOO / "bert_qdq_static"],
                         ids=lambda p: p.name)
def test_qdq_attention_runs_fused_and_verifies(tmp_path, capsys, model):
    out = tmp_path / "out"
    code = main(["run", str(model.with_suffix(".onnx")),
                 "--inputs", str(model.with_suffix(".inputs.npz")), "--verify",
                 "--keep-bundle", "--out", str(out), "--no-trace", "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    assert all(c["threshold"].endswith("(qdq)") for c in v["checks"]
               if c["reference"] == "onnxruntime")
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    att = [e for e in cmdq if str(e.get("layer_id", "")).startswith("attention")]
    ops = Counter(e["opcode"] for e in att)
    # the integer attention tiles: Q·Kᵀ and P·V on the TE, softmax and P's row scales on
    # the VE, nothing whole
    assert ops["TE_GEMM_TILE"] and ops["VE_SOFTMAX_TILE"] and ops["VE_ROWSCALE_TILE"]
    census = layer_op_census_of_bundle(out / "bundle")
    assert not [x for x in census.layers if x.startswith("attention")]


def _quantize_matmuls(src: Path, dst: Path) -> Path:
    """`src` through quantize_static as tests/models/README.md records for llama_qdq
    (QDQ, int8 activations and weights, MatMul / Gemm), calibrated on its own inputs."""
    import numpy as np
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    feeds = [dict(np.load(src.with_suffix(".inputs.npz")))]

    class Reader(CalibrationDataReader):
        def get_next(self):  # noqa: ANN202 (onnxruntime's interface)
            return feeds.pop() if feeds else None

    quantize_static(str(src.with_suffix(".onnx")), str(dst), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])
    return dst


def test_qdq_decode_step_fuses_and_keeps_the_fp32_cache(tmp_path, capsys):
    """A decode step (past KV, GQA) behind QDQs: one ATTENTION and two KV_UPDATEs per
    layer. The fused attention reads K / V at 8 bits while the model's cache stays fp32
    (KV_UPDATE qbits_kv null): the present outputs are stored fp32, exact against the
    interpreter (they were stored int8 with the attention's read scale)."""
    model = _quantize_matmuls(MODELS / "llama_decode", tmp_path / "llama_decode_qdq.onnx")
    g = import_onnx(model)
    ops = Counter(n.op_type for n in g.nodes)
    assert ops["ATTENTION"] == 2 and ops["KV_UPDATE"] == 4
    assert all(n.qbits_kv is None for n in g.nodes if n.op_type == "KV_UPDATE")
    out = tmp_path / "out"
    code = main(["run", str(model), "--inputs", str(MODELS / "llama_decode.inputs.npz"),
                 "--verify", "--out", str(out), "--no-trace", "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"]
    interp = {c["output"]: c for c in v["checks"] if c["reference"] == "interpreter"}
    assert {k for k in interp if k.startswith("present")} and \
        all(c["max_abs_err"] == 0 for c in interp.values())
