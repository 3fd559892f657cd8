"""Decoder-with-past ONNX files as PyTorch and Optimum export them (tests/models/
hf_decoders): `run` and `serve` take them; a learned position table read past its end is
one line naming the node, and with the model's context known (a config.json beside the
ONNX file, as Optimum writes it, or the rows of its position table) serve never asks for
a program beyond it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.host.onnx_positions import position_rows
from kernbench.host.serve.buckets import first_asked, interpolate

HF = Path(__file__).resolve().parents[1] / "models" / "hf_decoders"


@pytest.mark.parametrize("name", ["gpt2_dynamo", "llama_legacy", "gpt2_optimum"])
def test_serve_takes_a_decoder_exported_with_its_kv_cache(tmp_path, capsys, name):
    model = HF / f"{name}.onnx"
    assert main(["serve", str(model), "-t", "small", "--requests", "3",
                 "--rate", "1000", "--prompt-len", "8:40", "--output-len", "3", "--quiet",
                 "--out", str(tmp_path / "o")]) == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["serve"]["results"]["requests"] == 3
    assert stats["serve"]["steps"]["programs"] > 2
    # what the programs warn about is the model's: each warning once a run, naming the
    # file the user gave, not a program's bound copy; the exports' one-element -inf mask
    # constants are fill values, not broken weights, and are not warned about
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning:")]
    assert len(warnings) == len(set(warnings))
    assert all(w.startswith(f"warning: {model}: ") for w in warnings), warnings
    assert not any("NaN/Inf" in w for w in warnings), warnings


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


@pytest.mark.parametrize("name", ["gpt2_dynamo", "gpt2_optimum"])
def test_without_a_config_the_position_table_gives_the_context(tmp_path, capsys, name):
    # no config.json beside it: the 256-row position table (wpe) bounds the positions,
    # gathered by position_ids (Optimum) or by a Range over the past length (dynamo)
    assert position_rows(HF / f"{name}.onnx") == 256
    assert main(["serve", str(HF / f"{name}.onnx"), "-t", "small", "--requests", "1",
                 "--rate", "1000", "--prompt-len", "200", "--output-len", "52", "--quiet",
                 "--out", str(tmp_path / "o")]) == 0
    assert main(["serve", str(HF / f"{name}.onnx"), "-t", "small", "--requests", "1",
                 "--rate", "1000", "--prompt-len", "200", "--output-len", "58", "--quiet",
                 "--out", str(tmp_path / "o2")]) == 2
    assert "257 positions, beyond the model's context of 256" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


def test_rope_from_inverse_frequencies_and_token_tables_set_no_limit():
    # Llama's positions go through RoPE computed at run time: no table; the token
    # embedding (512 rows, gathered by input_ids) is not a position table
    assert position_rows(HF / "llama_legacy.onnx") is None


def test_a_position_table_is_told_from_a_token_table(tmp_path):
    from onnx import TensorProto, helper, numpy_helper, save

    wte = numpy_helper.from_array(np.zeros((50, 4), np.float32), "wte")
    wpe = numpy_helper.from_array(np.zeros((30, 4), np.float32), "wpe")
    rope = numpy_helper.from_array(np.zeros((20, 4), np.float32), "cos_cache")
    nodes = [helper.make_node("Gather", ["wte", "input_ids"], ["tok"]),
             # positions from the past length: Range(Shape(past)[2], + new)
             helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
             helper.make_node("Squeeze", ["ps"], ["p0"]),
             helper.make_node("Shape", ["input_ids"], ["is"], start=1, end=2),
             helper.make_node("Squeeze", ["is"], ["n"]),
             helper.make_node("Add", ["p0", "n"], ["p1"]),
             helper.make_node("Range", ["p0", "p1", "one"], ["pos"]),
             helper.make_node("Gather", ["wpe", "pos"], ["pe"]),
             helper.make_node("Cast", ["cos_cache"], ["cos16"], to=TensorProto.FLOAT16),
             helper.make_node("Gather", ["cos16", "position_ids"], ["cos"])]
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["b", "s"]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, ["b", 2, "p", 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)
         for x in ("tok", "pe", "cos")],
        [wte, wpe, rope, numpy_helper.from_array(np.array(1, np.int64), "one")])
    save(helper.make_model(g), str(tmp_path / "m.onnx"))
    assert position_rows(tmp_path / "m.onnx") == 20  # the smaller of wpe and the cache
    g.node.pop()  # without the cos cache: wpe's rows
    save(helper.make_model(g), str(tmp_path / "m.onnx"))
    assert position_rows(tmp_path / "m.onnx") == 30
    g.node.pop(7)  # no position table left: the token table is not one
    save(helper.make_model(g), str(tmp_path / "m.onnx"))
    assert position_rows(tmp_path / "m.onnx") is None


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


def test_diagnostics_of_a_bound_export_name_the_users_file(tmp_path, capsys):
    # the dims are bound into a temporary copy; a --strict refusal (a NaN put in one
    # weight) names the file the user gave, not that copy
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(HF / "gpt2_optimum.onnx"))
    init = next(i for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT
                and np.prod(i.dims) > 1000)
    a = numpy_helper.to_array(init).copy()
    a.flat[7] = np.nan
    init.CopyFrom(numpy_helper.from_array(a, init.name))
    model = tmp_path / "gpt2_nan.onnx"
    onnx.save(m, str(model))
    assert main(["run", str(model), "-t", "small", "--batch", "1", "--seq-len", "1",
                 "--kv-len", "16", "--strict", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {model}: weight "), err[-1]
    assert "NaN/Inf" in err[-1]
