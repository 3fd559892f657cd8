"""A compiled GEMM spreads its tiles over all PEs and their arrays run at the same time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

from kernbench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import int8_gemm  # noqa: E402


def test_gemm_tiles_run_concurrently_on_every_pe(tmp_path):
    onnx.save(int8_gemm(512, 512, 512), tmp_path / "g.onnx")
    q = tmp_path / "q.yaml"
    q.write_text('overrides:\n  - {match: "*", activation: 8}\n')
    out = tmp_path / "out"
    assert main(["run", "--keep-bundle", "--trace", str(tmp_path / "g.onnx"), "--qconfig", str(q), "--out", str(out),
                 "--verify"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    util = {k: v["utilization"] for k, v in stats["engines"].items() if k.endswith("pe_gemm")}
    assert len(util) == 4 and min(util.values()) > 0.5
    trace = json.loads((out / "trace.json").read_text())
    gemm_threads = {(e["pid"], e["tid"]) for e in trace["traceEvents"]
                    if e.get("ph") == "M" and e["name"] == "thread_name"
                    and e["args"]["name"] == "pe_gemm.main"}
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
             if e.get("ph") == "X" and (e["pid"], e["tid"]) in gemm_threads]
    # at some instant all four arrays are busy
    assert any(sum(1 for s, e in spans if s <= t < e) == 4 for t, _ in spans)
    layer = next(v for v in stats["layers"].values() if v["op_type"] == "GEMM")
    assert layer["bound_by"] == "compute" and layer["roofline_fraction"] > 0.5
