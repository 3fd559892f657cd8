"""Every committed test model compiles, validates, simulates and verifies on small and base."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.validate import validate_file
from kernbench.topology import load_topology

MODELS = Path(__file__).parent.parent / "models"
ALL = ["gpt2", "bert", "llama", "gpt2_decode", "llama_decode", "llama_opset23", "gpt2_qdq",
       "bert_qdq", "llama_qdq", "bert_qoperator", "bert_dynamic", "llama_int4"]


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", ALL)
def test_model_runs_and_verifies(tmp_path, capsys, model, topology):
    out = tmp_path / "out"
    code = main(["run", "--keep-bundle", "--trace", str(MODELS / f"{model}.onnx"), "--topology", topology, "--out", str(out),
                 "--verify", "--inputs", str(MODELS / f"{model}.inputs.npz"), "--no-trace"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    bundle = out / "bundle"
    assert validate_file(bundle / "cmdq.json", limits_for(load_topology(topology))) == []
    stats = json.loads((out / "stats.json").read_text())
    assert stats["layers"], "per-layer stats"
    for lid, layer in stats["layers"].items():
        assert layer["bound_by"] in ("compute", "memory"), lid
        assert layer["bottleneck"] is not None, lid
        # the fraction is bound / span (1 for a layer that takes no time), and the span is
        # not below the bound
        want = layer["bound_ns"] / layer["ns"] if layer["ns"] > 0 else 1.0
        assert layer["roofline_fraction"] == pytest.approx(want, rel=1e-5), (lid, layer)
        assert layer["ns"] + 1e-2 >= layer["bound_ns"], (lid, layer)
    verdict = json.loads((out / "verification.json").read_text())
    assert verdict["ok"]
    interp = [c for c in verdict["checks"] if c["reference"] == "interpreter"]
    assert interp and all(c["max_abs_err"] == 0.0 for c in interp), "bit-exact vs the IR"
    ort = [c for c in verdict["checks"] if c["reference"] == "onnxruntime"]
    assert ort and all(c["cosine"] >= 0.999 for c in ort)
    got = np.load(out / "outputs.npz")
    assert set(got.files) == set(np.load(MODELS / f"{model}.outputs.npz").files)


def test_timing_is_unchanged_by_the_data_pass(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", "--keep-bundle", "--trace", str(MODELS / "llama.onnx"), "--out", str(a)]) == 0
    assert main(["run", "--keep-bundle", "--trace", str(MODELS / "llama.onnx"), "--out", str(b), "--verify"]) == 0
    assert (a / "stats.json").read_bytes() == (b / "stats.json").read_bytes()
    assert (a / "trace.json").read_bytes() == (b / "trace.json").read_bytes()


FLOAT_MODELS = ["gpt2", "bert", "llama", "gpt2_decode", "llama_decode", "llama_opset23"]


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", FLOAT_MODELS)
def test_fp16_mode_verifies_within_1e_3(tmp_path, capsys, model, topology):
    q = tmp_path / "fp16.yaml"
    q.write_text("default: {weight: fp16, activation: fp16, kv: fp16}\n")
    out = tmp_path / "out"
    code = main(["run", "--keep-bundle", "--trace", str(MODELS / f"{model}.onnx"), "--qconfig", str(q), "--topology",
                 topology, "--out", str(out), "--verify", "--inputs",
                 str(MODELS / f"{model}.inputs.npz"), "--no-trace"])
    assert code == 0, capsys.readouterr().err[-2000:]
    verdict = json.loads((out / "verification.json").read_text())
    assert verdict["mode"] == "fp16"
    for c in verdict["checks"]:
        if c["reference"] == "onnxruntime":
            assert c["max_abs_err"] <= 1e-3, c
        else:
            assert c["ok"], c


def test_bundle_and_outputs_are_deterministic_files(tmp_path):
    import zipfile

    assert main(["run", "--keep-bundle", "--trace", str(MODELS / "gpt2.onnx"), "--out", str(tmp_path), "--verify",
                 "--no-report"]) == 0
    for npz in (tmp_path / "bundle" / "weights.npz", tmp_path / "outputs.npz"):
        with zipfile.ZipFile(npz) as z:  # no wall-clock timestamps inside the archives
            assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}, npz
    again = tmp_path / "again"
    assert main(["compile", str(MODELS / "gpt2.onnx"), "-o", str(again)]) == 0
    for name in ("cmdq.json", "memory.json", "weights.npz", "ir.json", "roofline.json"):
        assert (again / name).read_bytes() == (tmp_path / "bundle" / name).read_bytes(), name
