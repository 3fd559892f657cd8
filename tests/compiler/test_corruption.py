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
    return next(e for e in entries if e["opcode"] == opcode
                and e["layer_id"].startswith(layer_prefix))


def wrong_dram_addr(entries):  # noqa: ANN001
    e = _first_of(entries, "DMA_LOAD_TILE", "gemm")
    e["dram_addr"] += 256  # 64 floats later: valid memory, wrong data
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
