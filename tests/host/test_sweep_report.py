"""The sweep report's axes (issue 39 item 7): latency and energy in a unit picked from their
size (never "pJ ×1e7"), swept values as categories, one series per workload."""

from __future__ import annotations

from kernbench.host.sweep.report import human_scale, sensitivity_png, sensitivity_series
from kernbench.host.sweep.results import Table

ROWS = "cube.pe_template.pe_gemm.rows"


def _row(seq: int, rows: int, ns: float) -> dict:
    return {"model": "gpt2", "qconfig": "default", "seq_len": seq, "kv_len": 0, "batch": 1,
            ROWS: rows, "total_ns": ns, "status": "ok"}


def test_human_scale_picks_the_largest_unit_reached():
    assert human_scale([12_345_678.0, 9e6], "pJ") == (1e6, "µJ")
    assert human_scale([999.0], "pJ") == (1.0, "pJ")
    assert human_scale([8_853.0, 15_000.0], "ns") == (1e3, "µs")
    assert human_scale([51_375_079.7], "ns") == (1e6, "ms")
    assert human_scale([2.5e9], "ns") == (1e9, "s")
    assert human_scale([3.0], "mm²") == (1.0, "mm²")


def test_sensitivity_keeps_workloads_apart_on_categories():
    # two workloads whose latencies differ 10×: a pooled median would mix them
    rows = [_row(4, 64, 1000.0), _row(4, 8, 1200.0), _row(4, 16, 1100.0),
            _row(128, 64, 10000.0), _row(128, 8, 12000.0), _row(128, 16, 11000.0)]
    cats, series = sensitivity_series(Table([], rows, [ROWS]), ROWS)
    assert cats == ["8", "16", "64"]  # numeric values ascending, evenly spaced categories
    assert series == {"gpt2 default seq=4 kv=0 batch=1": {0: [1200.0], 1: [1100.0], 2: [1000.0]},
                      "gpt2 default seq=128 kv=0 batch=1": {0: [12000.0], 1: [11000.0],
                                                            2: [10000.0]}}
    # swept over seq_len: the workload label leaves seq_len out, so one series spans it
    cats, series = sensitivity_series(Table([], rows, ["seq_len"]), "seq_len")
    assert cats == ["4", "128"] and list(series) == ["gpt2 default kv=0 batch=1"]
    assert sorted(series["gpt2 default kv=0 batch=1"][1]) == [10000.0, 11000.0, 12000.0]
    assert sensitivity_png(Table([], rows, [ROWS]), ROWS)  # draws


def test_text_values_keep_the_spec_order():
    rows = [dict(_row(4, 8, 1.0), qconfig="w8"), dict(_row(4, 8, 2.0), qconfig="w4")]
    cats, series = sensitivity_series(Table([], rows, ["qconfig"]), "qconfig")
    assert cats == ["w8", "w4"] and series == {"gpt2 seq=4 kv=0 batch=1": {0: [1.0], 1: [2.0]}}
