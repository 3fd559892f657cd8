"""A layer the compiler cannot tile runs whole on one PE; `run` and `compile` say so in one
`warning:` line naming the layers (kept with --quiet), `--strict` refuses it (exit 2), and
a fully tiled program gets no such line."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

from kernbench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import int8_gemm  # noqa: E402


def _whole_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("warning: whole-layer ops:")]


def test_run_and_compile_name_the_layers_that_run_whole(tmp_path, capsys):
    model = tmp_path / "g.onnx"
    onnx.save(int8_gemm(1, 64, 256), model)
    # without a qconfig this fp32-activation GEMM is not tiled (a whole-layer TE op)
    assert main(["run", str(model), "--quiet", "--no-report", "--out", str(tmp_path / "r")]) == 0
    lines = _whole_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "1 layer runs on one PE" in lines[0]
    assert "GEMM as TE_LAYER_OP ×1: gemm_1" in lines[0]
    assert main(["compile", str(model), "-o", str(tmp_path / "c")]) == 0
    assert len(_whole_lines(capsys.readouterr().err)) == 1


def test_strict_refuses_a_whole_layer_op(tmp_path, capsys):
    model = tmp_path / "g.onnx"
    onnx.save(int8_gemm(1, 64, 256), model)
    out = tmp_path / "c"
    assert main(["compile", str(model), "-o", str(out), "--strict"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gemm_1" in err[0] and "refused with --strict" in err[0]
    assert not (out / "cmdq.json").exists()  # nothing half-written


def test_a_fully_tiled_program_has_no_whole_layer_warning(tmp_path, capsys):
    model = tmp_path / "g.onnx"
    onnx.save(int8_gemm(32, 64, 256), model)
    q = tmp_path / "q.yaml"
    q.write_text('overrides:\n  - {match: "*", activation: 8}\n')
    assert main(["run", str(model), "--qconfig", str(q), "--quiet", "--no-report",
                 "--out", str(tmp_path / "r")]) == 0
    assert not _whole_lines(capsys.readouterr().err)
