"""The summary's per-layer estimate columns: numbers when the cost model ran (report on),
a dash in a streamed run (no report, no trace), which has no estimate, never a 0.0."""

from __future__ import annotations

from pathlib import Path

from kernbench.cli import main

GPT2 = Path(__file__).resolve().parents[1] / "zoo" / "gpt2.onnx"


def _layer_rows(out: Path) -> list[list[str]]:
    lines = (out / "summary.txt").read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("layer "))
    return [ln.split() for ln in lines[head + 1:] if ln and not ln.startswith(" ")][:5]


def test_streamed_run_shows_no_estimate(tmp_path):
    assert main(["run", str(GPT2), "--out", str(tmp_path / "s"), "--quiet",
                 "--no-report"]) == 0
    rows = _layer_rows(tmp_path / "s")
    assert rows and all(r[3] == "–" and r[5] == "–" for r in rows), rows


def test_run_with_report_shows_the_estimate(tmp_path):
    assert main(["run", str(GPT2), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    rows = _layer_rows(tmp_path / "r")
    assert rows and all(float(r[3]) > 0 and float(r[5]) > 0 for r in rows), rows
