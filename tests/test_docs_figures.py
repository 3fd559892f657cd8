"""Docs that cannot go stale (issue 39 item 4, ADR-0935): the cheap runs the docs mark are
re-run and every marked figure and promised file checked (`make docs-check` runs the slow
ones too); and the checker itself fails on a changed figure, a missing or an unexpected
file, and a marker it cannot read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts" / "docs_check.py")
assert _spec is not None and _spec.loader is not None
docs_check = importlib.util.module_from_spec(_spec)
sys.modules["docs_check"] = docs_check  # its dataclasses look their module up
_spec.loader.exec_module(docs_check)


WITH_CHEAP_RUNS = [p for p in docs_check.DOCS
                   if any(not r.slow for r in docs_check.parse(p)[0].values())]


def test_docs_mark_cheap_runs():
    names = {p.name for p in WITH_CHEAP_RUNS}
    assert {"README.md", "models.md", "topologies.md", "energy.md", "kernels.md"} <= names


@pytest.mark.parametrize("doc", WITH_CHEAP_RUNS, ids=lambda p: p.name)
def test_the_cheap_doc_figures_match_a_fresh_run(doc):
    problems, runs = docs_check.check([doc], slow=False)
    assert problems == [] and runs >= 1


def test_every_doc_marks_its_slow_runs_too():
    """The slow runs parse (the commands exist, every figure has a number beside it)."""
    slow = 0
    for p in docs_check.DOCS:
        runs, problems = docs_check.parse(p)
        assert problems == [], problems
        slow += sum(r.slow for r in runs.values())
        for r in runs.values():
            assert r.figs or r.files, f"{r.where}: a run with nothing to check"
    assert slow >= 2


def test_rounding_as_shown():
    m = docs_check.matches
    assert m("51.375", 51_375_079.7, "ms") and not m("51.376", 51_375_079.7, "ms")
    assert m("8 853", 8853.219, "ns") and m("39,864", 39_863.685, "=")
    assert m("65.3", 0.653149, "%") and not m("65.4", 0.653149, "%")
    assert m("96", 96 * 2**30, "GiB") and m("2.8", 2800.0, "TB/s")


def test_a_figure_is_found_after_its_anchor():
    text = ("memory 3.5 ms: weights + KV cache at the int8 peak\n"
            "weights 8.95 GiB (8.03 B params) + KV cache 0.125 GiB\n")
    shown = docs_check._shown
    assert shown(text, "weights") == "8"  # the first 'weights': the '8' of 'int8' follows
    assert shown(text, "^weights") == "8.95"  # a line that starts with it
    assert shown(text, "GiB (") == "8.03" and shown(text, "GiB (", nth=2) == "0.125"
    assert shown(text, "^KV cache") is None


def test_the_checker_fails_on_a_stale_figure_and_file(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- kb-run r: kernbench run llama --seq-len 4 --no-report --out out/x -->\n"
        "took <!-- kb-fig r total_ns µs -->1.0 µs, MACs "
        "<!-- kb-fig r layers.csv:max(macs) = -->0\n"
        "<!-- kb-file r layers.csv --><!-- kb-file r report.html -->"
        "<!-- kb-nofile r summary.txt -->\n"
        "<!-- kb-fig nosuchrun total_ns ns -->5\n", encoding="utf-8")
    monkeypatch.setattr(docs_check, "ROOT", tmp_path)
    problems, runs = docs_check.check([doc], slow=False)
    text = "\n".join(problems)
    assert runs == 1 and len(problems) == 5, text
    assert "the doc shows 1.0 µs, the run gives" in text
    assert "layers.csv:max(macs): the doc shows 0 =" in text
    assert "wrote no report.html" in text and "wrote summary.txt" in text
    assert "unknown run" in text
