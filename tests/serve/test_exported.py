"""Decoder-with-past ONNX files as PyTorch and Optimum export them (tests/models/
hf_decoders): `run` and `serve` take them; a learned position table read past its end is
one line naming the node, and with the model's context known (a config.json beside the
ONNX file, as Optimum writes it) serve never asks for a program beyond it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.host.serve.buckets import first_asked, interpolate

HF = Path(__file__).resolve().parents[1] / "models" / "hf_decoders"


@pytest.mark.parametrize("name", ["gpt2_dynamo", "llama_legacy", "gpt2_optimum"])
def test_serve_takes_a_decoder_exported_with_its_kv_cache(tmp_path, name):
    assert main(["serve", str(HF / f"{name}.onnx"), "-t", "small", "--requests", "3",
                 "--rate", "1000", "--prompt-len", "8", "--output-len", "3", "--quiet",
                 "--out", str(tmp_path / "o")]) == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["serve"]["results"]["requests"] == 3


def test_positions_past_the_table_are_one_line_naming_the_node(tmp_path, capsys):
    assert main(["run", str(HF / "gpt2_dynamo.onnx"), "-t", "small", "--batch", "1",
                 "--seq-len", "1", "--kv-len", "300", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: node ") and "outside the 256 rows" in err[-1], err
    assert not any("Traceback" in line for line in err)


def test_a_config_beside_the_onnx_file_gives_serve_the_context(tmp_path, capsys):
    d = tmp_path / "gpt2"
    d.mkdir()
    shutil.copy(HF / "gpt2_dynamo.onnx", d / "model.onnx")
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 256}))
    # 200 + 52 - 1 = 251 positions: within 256, though the bucket edges around its past
    # tokens reach 256 (a program past the table): never asked for
    assert main(["serve", str(d / "model.onnx"), "-t", "small", "--requests", "1",
                 "--rate", "1000", "--prompt-len", "200", "--output-len", "52", "--quiet",
                 "--out", str(tmp_path / "o")]) == 0
    assert main(["serve", str(d / "model.onnx"), "-t", "small", "--requests", "1",
                 "--rate", "1000", "--prompt-len", "200", "--output-len", "58", "--quiet",
                 "--out", str(tmp_path / "o2")]) == 2
    assert "257 positions, beyond the model's context of 256" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [(1, 1, 250), (3, 1, 255), (2, 200, 50), (1, 250, 0),
                                   (40, 1, 130), (5, 17, 200)])
def test_the_bucket_rule_asks_no_program_beyond_the_context(shape):
    asked: list[tuple[int, ...]] = []

    def program(s: tuple[int, ...]) -> float:
        asked.append(s)
        return float(s[0] * 1000 + s[1] * 10 + s[2]) + (s[2] % 3)  # not linear: midpoints

    interpolate(shape, program, context=256)
    assert asked and all(s[1] + s[2] <= 256 for s in asked), asked
    assert all(s[1] + s[2] <= 256 for s in first_asked(shape, context=256))


@pytest.mark.parametrize("shape", [(1, 1, 250), (3, 1, 255), (2, 3, 250)])
def test_without_the_context_these_shapes_would_round_past_it(shape):
    wide: list[tuple[int, ...]] = []
    interpolate(shape, lambda s: wide.append(s) or 1.0)
    assert any(s[1] + s[2] > 256 for s in wide)  # what the cap prevents
