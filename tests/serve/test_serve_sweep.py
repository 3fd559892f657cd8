"""A load sweep through `kernbench sweep`: a `serve:` section swept over rates."""

from __future__ import annotations

import csv
from pathlib import Path

from kernbench.host.sweep import finish_sweep, plan_sweep, run_points

ROOT = Path(__file__).resolve().parents[2]


def test_load_sweep_gives_latency_against_throughput(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "serve:\n  rate: [5000, 200000]\n  requests: 12\n  prompt_len: '16:64'\n"
                    "  output_len: 4\n  slo: ttft=1ms\n")
    plan = plan_sweep(spec)
    assert [p.serve["rate"] for p in plan.points] == [5000.0, 200000.0]
    assert plan.points[0].id != plan.points[1].id
    run_points(plan.points, tmp_path / "out", workers=1)
    table, csv_path, html_path = finish_sweep(plan, tmp_path / "out")
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    slow, fast = rows
    # more load: more requests per second served, and they wait longer for a first token
    assert float(fast["requests_per_s"]) > float(slow["requests_per_s"])
    assert float(fast["ttft_p99_s"]) > float(slow["ttft_p99_s"])
    assert "Latency against throughput" in html_path.read_text()
