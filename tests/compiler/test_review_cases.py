"""Quantization variants and bad bundles / inputs that once went wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main

MODELS = Path(__file__).parent.parent / "models"


@pytest.mark.parametrize("qconfig", [
    "default: {weight: 4}",              # int4 weights, packed two per byte in HBM
    "default: {activation: 4}",          # A4: GEMMs run as whole-layer ops
    "default: {kv: 4}",                  # a 4-bit KV cache
    "overrides:\n  - {match: '*mlp*', weight: 4}\n  - {match: '*attn*', kv: 4}",
])
def test_quantization_variants_verify(tmp_path, capsys, qconfig):
    q = tmp_path / "q.yaml"
    q.write_text(qconfig + "\n")
    out = tmp_path / "out"
    code = main(["run", "--keep-bundle", "--trace", str(MODELS / "gpt2_decode.onnx"), "--qconfig", str(q), "--out",
                 str(out), "--verify", "--no-trace", "--no-report", "--inputs",
                 str(MODELS / "gpt2_decode.inputs.npz")])
    err = capsys.readouterr().err
    # aggressive quantization may miss the W8A8 cosine against onnxruntime (exit 1); the
    # simulator must still agree with the reference interpreter exactly
    assert code in (0, 1), err[-1500:]
    verdict = json.loads((out / "verification.json").read_text())
    interp = [c for c in verdict["checks"] if c["reference"] == "interpreter"]
    assert interp and all(c["ok"] for c in interp), interp
    assert verdict["first_divergence"] is None


def test_layer_op_filling_the_staging_tcm_exactly(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "exp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 256])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9),
              tmp_path / "exp.onnx")
    assert main(["run", "--keep-bundle", "--trace", str(tmp_path / "exp.onnx"), "--out", str(tmp_path / "o"),
                 "--verify", "--no-report"]) == 0


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "bundle"
    assert main(["compile", str(MODELS / "gpt2.onnx"), "-o", str(out), "-t", "base"]) == 0
    return out


def _one_line_exit_2(capsys, args) -> str:  # noqa: ANN001
    code = main(args)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2, err[-1500:]
    assert "Traceback" not in err and len(lines) == 1
    return lines[0]


def test_bundle_on_a_smaller_npu_is_refused(bundle, tmp_path, capsys):
    line = _one_line_exit_2(capsys, ["simulate", str(bundle), "-t", "small", "--verify",
                                     "--out", str(tmp_path / "o")])
    assert "PE index" in line or "larger NPU" in line


def test_corrupt_memory_json(bundle, tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    (b / "memory.json").write_text("garbage")
    line = _one_line_exit_2(capsys, ["simulate", str(b), "--verify", "--out", str(tmp_path / "o")])
    assert "memory.json" in line


@pytest.mark.parametrize(("ids", "expected"), [
    (np.full((1, 16), 1.5, np.float32), "not integers"),
    (np.full((1, 16), 999, np.int64), "ids must lie in [0, 256)"),
    (np.zeros((1, 8), np.int64), "shape [1, 8]"),
])
def test_bad_inputs_are_one_line(bundle, tmp_path, capsys, ids, expected):
    f = tmp_path / "in.npz"
    np.savez(f, input_ids=ids)
    line = _one_line_exit_2(capsys, ["simulate", str(bundle), "--verify", "--inputs", str(f),
                                     "--out", str(tmp_path / "o")])
    assert expected in line and "input_ids" in line
