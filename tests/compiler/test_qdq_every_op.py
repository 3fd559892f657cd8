"""A quantize_static QDQ export with every op type quantized (onnxruntime's default
`op_types_to_quantize`): QDQ pairs sit between Reshape and Transpose (QDQ → Transpose →
QDQ on the head split), and the RMSNorm weights and epsilon are quantized constants read
by element-wise tiles. The run compiles and is exact against the interpreter and within
the QDQ tolerance of onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main

MODELS = Path(__file__).resolve().parents[1] / "models"


def quantize_every_op(src: Path, inputs: Path, dst: Path) -> Path:
    """`src` through onnxruntime's quantize_static (QDQ, uint8 activations, int8 weights,
    every op type it knows), calibrated on the model's own inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    feeds = [dict(np.load(inputs))]

    class Reader(CalibrationDataReader):
        def get_next(self):  # noqa: ANN202 (onnxruntime's interface)
            return feeds.pop() if feeds else None

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return dst


@pytest.fixture(scope="module")
def llama_qdq_all(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("qdq_all")
    return quantize_every_op(MODELS / "llama.onnx", MODELS / "llama.inputs.npz",
                             d / "llama_qdq_all.onnx")


def test_qdq_between_reshape_and_transpose_compiles_and_verifies(tmp_path, capsys,
                                                                 llama_qdq_all):
    import onnx

    m = onnx.load(str(llama_qdq_all))
    prod = {o: n for n in m.graph.node for o in n.output}
    # the case of the report: QuantizeLinear(Reshape) → DQ → Transpose → Q → DQ
    assert any(n.op_type == "QuantizeLinear" and prod[n.input[0]].op_type == "Transpose"
               and prod[prod[prod[prod[n.input[0]].input[0]].input[0]].input[0]].op_type
               == "Reshape" for n in m.graph.node if n.input[0] in prod)
    out = tmp_path / "out"
    code = main(["run", str(llama_qdq_all), "--inputs", str(MODELS / "llama.inputs.npz"),
                 "--verify", "--keep-bundle", "--out", str(out), "--no-trace", "--no-report",
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    # a vector tile never reads a quantized constant's raw integers
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    ew = [e for e in cmdq if e["opcode"] in ("VE_ELEMENTWISE_TILE", "VE_ADD_TILE",
                                             "VE_MUL_TILE")]
    assert ew and not [e for e in ew if e.get("in2_dtype") in ("uint8", "int8")]
