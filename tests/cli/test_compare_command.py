"""`kernbench compare` (issue 39 item 7): two presets on one model, or two stats.json files;
every compared value is the one stats.json holds, ratios are B / A; bad input is one line,
exit 2."""

from __future__ import annotations

import json

import pytest

from kernbench.cli import main


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    for preset in ("small", "base"):
        assert main(["run", "llama", "-t", preset, "--llm", "--no-report", "--quiet",
                     "--out", str(d / preset)]) == 0
    return d


def _doc(capsys, args: list[str]) -> dict:
    capsys.readouterr()
    assert main(["compare", *args, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def _check(doc: dict, a: dict, b: dict) -> None:
    fig = {r["figure"]: r for r in doc["figures"]}
    for name, (ka, kb) in {"total_ns": (a["total_ns"], b["total_ns"]),
                           "energy_pj": (a["energy"]["total_pj"], b["energy"]["total_pj"]),
                           "area_mm2": (a["area_mm2"]["total"], b["area_mm2"]["total"]),
                           "ttft_ns": (a["llm"]["ttft_ns"], b["llm"]["ttft_ns"])}.items():
        assert (fig[name]["a"], fig[name]["b"]) == (ka, kb), name
        assert fig[name]["ratio"] == pytest.approx(kb / ka, abs=1e-6), name
    assert fig["pes"]["a"] == 4 and fig["pes"]["b"] == 64  # small and base
    assert fig["bound_by"]["a"] == a["model_bound"]["bound_by"]
    assert "tpot_ns" not in fig  # neither run has it (two prefills): left out


def test_two_stats_files(runs, capsys):
    a = json.loads((runs / "small" / "stats.json").read_text())
    b = json.loads((runs / "base" / "stats.json").read_text())
    doc = _doc(capsys, [str(runs / "small"), str(runs / "base" / "stats.json")])
    _check(doc, a, b)


def test_two_presets_on_a_model_equal_two_runs(runs, capsys):
    a = json.loads((runs / "small" / "stats.json").read_text())
    b = json.loads((runs / "base" / "stats.json").read_text())
    doc = _doc(capsys, ["small", "base", "--model", "llama"])
    assert (doc["a"], doc["b"]) == ("small", "base")
    _check(doc, a, b)
    capsys.readouterr()
    assert main(["compare", str(runs / "small"), str(runs / "base"), "--quiet"]) == 0
    out = capsys.readouterr().out
    ratio = b["total_ns"] / a["total_ns"]
    assert out.count("\n") == 1 and f"time {ratio:.3f}×" in out


@pytest.mark.parametrize("args, says", [
    (["small", "base"], "--model"),
    (["small", "STATS"], "is a stats file"),
    (["STATS", "STATS", "--model", "llama"], "apply to two topologies"),
    (["NOTSTATS", "STATS"], "not a kernbench stats.json"),
    (["MISSING", "STATS"], "no such file"),
    (["smal", "base", "--model", "llama"], "smal"),
])
def test_bad_input_is_one_line(runs, tmp_path, capsys, args, says):
    (tmp_path / "other.json").write_text('{"a": 1}')
    subst = {"STATS": str(runs / "small" / "stats.json"),
             "NOTSTATS": str(tmp_path / "other.json"),
             "MISSING": str(tmp_path / "missing.json")}
    capsys.readouterr()
    assert main(["compare", *[subst.get(x, x) for x in args]]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], cap.err
