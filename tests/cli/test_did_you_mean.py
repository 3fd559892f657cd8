"""Issue 39 item 6: an unknown name gets a "did you mean" (topology keys from --set and
YAML, QConfig keys, presets, built-in models); a missing path is named as the user gave
it; `kernbench list` shows what may be named. Each error is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.config.keys import known_keys
from kernbench.config.schema import TopologyConfig
from kernbench.errors import did_you_mean

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"


def _exit2(capsys, args: list[str]) -> str:  # noqa: ANN001
    code = main(args)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2, err[-1500:]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_did_you_mean_picks_the_closest_or_nothing():
    assert did_you_mean("rowz", ["cols", "rows", "dataflow"]) == " (did you mean 'rows'?)"
    assert did_you_mean("zzzzzz", ["cols", "rows"]) == ""


def test_known_keys_follow_the_location():
    # the keys of the model at loc[:-1], not of the top level
    assert {"rows", "cols", "dataflow"} <= set(
        known_keys(TopologyConfig, ("cube", "pe_template", "pe_gemm", "rowz")))
    assert "pe_gemm" in known_keys(TopologyConfig, ("cube", "pe_template", "pe_gemz"))
    assert "rows" not in known_keys(TopologyConfig, ("cube", "pe_template", "pe_gemz"))


def test_set_unknown_key_suggests(capsys):
    line = _exit2(capsys, ["topology", "show", "small", "--set",
                           "cube.pe_template.pe_gemm.rowz=64"])
    assert "field 'cube.pe_template.pe_gemm.rowz'" in line
    assert "unknown key (did you mean 'rows'?)" in line


def test_yaml_unknown_key_suggests(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_text("extends: small\ncube:\n  router:\n    hop_latency: 3\n")
    line = _exit2(capsys, ["topology", "show", str(f)])
    assert str(f) in line and "field 'cube.router.hop_latency'" in line
    assert "did you mean 'hop_latency_ns'?" in line


def test_unknown_key_without_a_close_one_has_no_suggestion(capsys):
    line = _exit2(capsys, ["topology", "show", "small", "--set", "cube.qqqqqqqq=1"])
    assert line.endswith("unknown key")


def test_preset_typo_suggests(capsys):
    line = _exit2(capsys, ["topology", "show", "bsae"])
    assert "did you mean 'base'?" in line
    for p in ("small", "base", "large", "n150", "p150"):
        assert p in line


def test_qconfig_unknown_key_suggests(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text("default:\n  weigths: 4\n")
    line = _exit2(capsys, ["compile", str(GPT2), "-o", str(tmp_path / "b"), "--qconfig", str(q)])
    assert str(q) in line and "weigths" in line and "did you mean 'weight'?" in line
    assert not (tmp_path / "b").exists()


def test_builtin_model_typo_lists_and_suggests(tmp_path, capsys):
    line = _exit2(capsys, ["run", "gpt-2", "--out", str(tmp_path / "o")])
    assert line.startswith("error: gpt-2: ")
    assert "did you mean 'gpt2'?" in line
    for name in ("gpt2", "llama", "gpt2-small"):
        assert name in line


def test_folder_without_a_model_is_named_as_given(tmp_path, capsys):
    line = _exit2(capsys, ["run", "tests/hf_configs", "--out", str(tmp_path / "o")])
    assert line.startswith("error: tests/hf_configs: ")
    assert "ir.json" not in line.split(":", 2)[1]  # no file the user never gave
    assert "tests/hf_configs/ir.json" not in line


def test_missing_onnx_file_is_named_as_given(tmp_path, capsys):
    line = _exit2(capsys, ["run", "nothere/model.onnx", "--out", str(tmp_path / "o")])
    assert line.startswith("error: nothere/model.onnx: ")


def test_list_text_and_json(capsys):
    from kernbench.components.registry import registered
    from kernbench.models.builders import MODELS

    assert main(["list", "--json"]) == 0
    cat = json.loads(capsys.readouterr().out)
    presets = sorted(p.stem for p in (ROOT / "src/kernbench/config/presets").glob("*.yaml"))
    assert cat["presets"] == presets and {"small", "base", "large"} <= set(presets)
    assert cat["models"] == list(MODELS)
    assert sorted((k, i) for k, impls in cat["components"].items() for i in impls) \
        == sorted(registered())
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "presets: " + ", ".join(presets) in out
    assert "built-in models: gpt2, llama, gpt2-small" in out
    assert "pe_gemm: " in out


@pytest.mark.parametrize("cmd", [["run", "--help"], ["compile", "--help"], ["simulate", "--help"],
                                 ["validate", "--help"], ["topology", "show", "--help"],
                                 ["kernel", "--help"]])
def test_help_lists_every_preset(capsys, cmd):
    main(cmd)
    out = " ".join(capsys.readouterr().out.split())
    for p in sorted(x.stem for x in (ROOT / "src/kernbench/config/presets").glob("*.yaml")):
        assert p in out, p
