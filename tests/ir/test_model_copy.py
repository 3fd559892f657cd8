"""`copy_with_external_data`: the bundle's model copy carries the external data files the
model references, whether the model was just loaded (its references remembered) or not,
and a model rewritten after its load is copied as it is now."""

from __future__ import annotations

from pathlib import Path

import onnx

from kernbench.ir.onnx_import import loader

MODELS = Path(__file__).resolve().parents[1] / "models"


def _save(path: Path, location: str | None) -> None:
    m = onnx.load(str(MODELS / "gpt2.onnx"))
    if location is None:
        onnx.save(m, str(path))
    else:
        onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=location, size_threshold=64)


def _copied(src: Path, dst: Path) -> set[str]:
    dst.mkdir()
    loader.copy_with_external_data(src, dst / "model.onnx")
    return {p.name for p in dst.iterdir()}


def test_copy_of_a_loaded_model_carries_its_external_data(tmp_path):
    src = tmp_path / "m"
    src.mkdir()
    _save(src / "m.onnx", "w.data")
    loader.load_model(src / "m.onnx")
    assert _copied(src / "m.onnx", tmp_path / "a") == {"model.onnx", "w.data"}
    assert (tmp_path / "a" / "w.data").read_bytes() == (src / "w.data").read_bytes()
    assert (tmp_path / "a" / "model.onnx").read_bytes() == (src / "m.onnx").read_bytes()


def test_copy_of_a_model_never_loaded_parses_it(tmp_path):
    src = tmp_path / "m"
    src.mkdir()
    _save(src / "m.onnx", "other.data")
    assert _copied(src / "m.onnx", tmp_path / "a") == {"model.onnx", "other.data"}


def test_copy_follows_a_model_rewritten_after_its_load(tmp_path):
    src = tmp_path / "m"
    src.mkdir()
    _save(src / "m.onnx", None)  # loaded without external data ...
    loader.load_model(src / "m.onnx")
    _save(src / "m.onnx", "late.data")  # ... then rewritten with it
    assert _copied(src / "m.onnx", tmp_path / "a") == {"model.onnx", "late.data"}
