"""--verify in every precision (docs/verification.md) and models with ONNX external data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from kernbench.cli import main
from kernbench.host.verify import ORT_TOLERANCE, ort_tolerance
from kernbench.ir import import_onnx

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"


def _checks(out: Path) -> dict[str, dict]:
    v = json.loads((out / "verification.json").read_text())
    return {c["reference"]: c for c in v["checks"]}


@pytest.mark.parametrize(("default", "mode"), [("{weight: 4, activation: 8, kv: fp32}", "W4A8"),
                                               ("{weight: 4, activation: 8, kv: 4}", "W4A8KV4")])
def test_four_bit_bit_exact_with_the_interpreter_passes(tmp_path, capsys, default, mode):
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    out = tmp_path / "o"
    code = main(["run", str(MODELS / "gpt2.onnx"), "--qconfig", str(q), "--verify", "--quiet",
                 "--inputs", str(MODELS / "gpt2.inputs.npz"), "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    c = _checks(out)
    assert c["interpreter"]["max_abs_err"] == 0.0 and c["interpreter"]["ok"]
    kind, lim = ORT_TOLERANCE[mode]
    assert c["onnxruntime"]["threshold"] == f"cosine >= {lim:g} ({mode})"
    # 4-bit weights are visibly lossy against the float model, yet within the tolerance
    assert lim <= c["onnxruntime"]["cosine"] < 0.999


def test_unlisted_combination_takes_its_narrowest_width():
    assert ort_tolerance("W4A16") == ORT_TOLERANCE["W4A8KV4"]
    assert ort_tolerance("A8KV8") == ORT_TOLERANCE["W8A8KV8"]


def test_verify_without_model_onnx_says_it_skipped_onnxruntime(tmp_path, capsys):
    # a bundle compiled from an ir.json has no model.onnx
    import_onnx(MODELS / "gpt2.onnx").save(tmp_path / "ir" / "ir.json")
    b = tmp_path / "b"
    assert main(["compile", str(tmp_path / "ir" / "ir.json"), "--out", str(b), "--quiet"]) == 0
    assert not (b / "model.onnx").exists()
    assert main(["simulate", str(b), "--verify", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert "onnxruntime skipped" in capsys.readouterr().err
    assert set(_checks(tmp_path / "o")) == {"interpreter"}


def test_verify_of_a_bundle_whose_model_copy_was_deleted_is_one_line(tmp_path, capsys):
    # the IR weights that are the model's initializers are read from the copy (ADR-1185)
    b = tmp_path / "b"
    assert main(["compile", str(MODELS / "gpt2.onnx"), "--out", str(b), "--quiet"]) == 0
    (b / "model.onnx").unlink()
    assert main(["simulate", str(b), "--verify", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("ir_weights_model.json: lists weights of model.onnx, which is "
                            "missing"), err
    assert "Traceback" not in "\n".join(err)


def _external(tmp_path: Path, location: str = "weights.data") -> Path:
    d = tmp_path / "model"
    d.mkdir()
    m = onnx.load(str(MODELS / "gpt2.onnx"))
    onnx.save(m, str(d / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=64)
    return d / "m.onnx"


def test_external_data_model_runs_and_verifies(tmp_path, capsys):
    model = _external(tmp_path)
    out = tmp_path / "o"
    code = main(["run", str(model), "--verify", "--keep-bundle", "--quiet", "--inputs",
                 str(MODELS / "gpt2.inputs.npz"), "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert (out / "bundle" / "weights.data").is_file()  # the bundle carries the data
    c = _checks(out)
    assert c["interpreter"]["ok"] and c["onnxruntime"]["ok"]
    # the bundle stands alone: verify it again from its own folder, the source removed
    shutil.rmtree(model.parent)
    assert main(["simulate", str(out / "bundle"), "--verify", "--quiet", "--out",
                 str(tmp_path / "o2")]) == 0
    assert _checks(tmp_path / "o2")["onnxruntime"]["ok"]


def test_external_data_outside_the_model_folder_refused(tmp_path, capsys):
    model = _external(tmp_path)
    (model.parent / "weights.data").rename(tmp_path / "weights.data")
    m = onnx.load(str(model), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../weights.data"
    onnx.save(m, str(model))
    code = main(["run", str(model), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "leaves the model's folder" in err and "Traceback" not in err
