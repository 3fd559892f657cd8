"""A corrupted bundle fails verification (exit 1) and names the first diverging layer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernbench.cli import main

MODEL = Path(__file__).parent.parent / "models" / "gpt2.onnx"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "bundle"
    assert main(["compile", str(MODEL), "-o", str(out)]) == 0
    return out


def _corrupt(bundle: Path, tmp: Path, edit) -> Path:  # noqa: ANN001
    b = tmp / "corrupt"
    shutil.copytree(bundle, b)
    prog = json.loads((b / "cmdq.json").read_text())
    layer = edit(prog["cmdq"])
    (b / "cmdq.json").write_text(json.dumps(prog))
    return b, layer


def _first_of(entries, opcode, layer_prefix):  # noqa: ANN001
    # a layer that stores its own output: a GEMM whose consumer runs in its epilogue
    # (ADR-0701) never stores, so a wrong value in it first shows in that consumer
    deq = {e["id"] for e in entries if e["opcode"] == "VE_DEQUANTIZE_TILE"}
    storing = {e["layer_id"] for e in entries if e["opcode"] == "DMA_STORE_TILE"
               and deq & set(e["deps_before"])}
    return next(e for e in entries if e["opcode"] == opcode
                and e["layer_id"].startswith(layer_prefix) and e["layer_id"] in storing)


def wrong_dram_addr(entries):  # noqa: ANN001
    layer = _first_of(entries, "DMA_LOAD_TILE", "gemm")["layer_id"]
    # the last W tile of the layer, 256 bytes earlier: still inside the weight (valid
    # memory, wrong data)
    e = max((x for x in entries if x["opcode"] == "DMA_LOAD_TILE"
             and x["layer_id"] == layer and x["tensor_role"] == "weight"
             and x["num_elements"] >= 1024), key=lambda x: x["dram_addr"])
    e["dram_addr"] -= 256
    return e["layer_id"]


def swapped_spm_offset(entries):  # noqa: ANN001
    e = _first_of(entries, "TE_GEMM_TILE", "gemm")
    e["ifm_offset"], e["ofm_offset"] = e["ofm_offset"], e["ifm_offset"]
    e["ifm_bank"], e["ofm_bank"] = e["ofm_bank"], e["ifm_bank"]
    return e["layer_id"]


def dropped_dependency(entries):  # noqa: ANN001
    # the store of a GEMM result no longer waits for the epilogue that produces it
    e = _first_of(entries, "DMA_STORE_TILE", "gemm")
    e["deps_before"] = []
    return e["layer_id"]


@pytest.mark.parametrize("edit", [wrong_dram_addr, swapped_spm_offset, dropped_dependency])
def test_corruption_fails_and_names_the_layer(bundle, tmp_path, capsys, edit):
    b, layer = _corrupt(bundle, tmp_path, edit)
    code = main(["simulate", str(b), "--verify", "--out", str(tmp_path / "out"), "--no-trace"])
    err = capsys.readouterr().err
    assert code == 1, err[-1500:]
    assert "VERIFICATION FAILED" in err
    verdict = json.loads((tmp_path / "out" / "verification.json").read_text())
    assert verdict["first_divergence"]["layer"] == layer
    assert f"first diverging layer: {layer}" in " ".join(err.split())


def test_the_intact_bundle_verifies(bundle, tmp_path, capsys):
    assert main(["simulate", str(bundle), "--verify", "--out", str(tmp_path / "o"),
                 "--dump-intermediates", "--no-trace"]) == 0
    assert "layer outputs match the reference interpreter" in " ".join(
        capsys.readouterr().err.split())


def test_a_bundle_that_onnxruntime_disagrees_with_fails_on_that_check_alone(bundle, tmp_path,
                                                                           capsys):
    """The bundle's model.onnx gets noise on its weight matrices: the program still equals
    the IR interpreter (its reference is ir.json), but onnxruntime's outputs of model.onnx
    now differ, so the verdict fails on that check alone, with exit 1."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from kernbench.ir.bundle_ir import load_bundle_ir, save_bundle_ir

    b = tmp_path / "other_model"
    shutil.copytree(bundle, b)
    # every IR weight into ir_weights.npz (none read from model.onnx, ADR-1185): the noise
    # below then reaches onnxruntime's model alone
    save_bundle_ir(load_bundle_ir(b), b)
    m = onnx.load(str(b / "model.onnx"))
    rng = np.random.default_rng(0)
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.ndim == 2 and w.dtype == np.float32:
            noisy = w + rng.standard_normal(w.shape).astype(np.float32) * np.abs(w).max()
            init.CopyFrom(numpy_helper.from_array(noisy, init.name))
    onnx.save(m, str(b / "model.onnx"))
    code = main(["simulate", str(b), "--verify", "--out", str(tmp_path / "out"), "--no-trace"])
    err = capsys.readouterr().err
    assert code == 1, err[-1500:]
    assert "VERIFICATION FAILED" in err
    verdict = json.loads((tmp_path / "out" / "verification.json").read_text())
    assert verdict["ok"] is False
    checks = verdict["checks"]
    assert {c["reference"] for c in checks} == {"interpreter", "onnxruntime"}
    assert all(c["ok"] for c in checks if c["reference"] == "interpreter")
    ort = [c for c in checks if c["reference"] == "onnxruntime"]
    assert ort and not any(c["ok"] for c in ort)
    lim = float(ort[0]["threshold"].split(">=")[1].split()[0])
    assert all(c["cosine"] < lim for c in ort)
