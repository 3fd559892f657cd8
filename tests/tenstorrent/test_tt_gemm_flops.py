"""scripts/tt_gemm_flops.py: the published GEMM table parsed into the committed CSV.

The parser is run on a hand-made two-table excerpt in the source's layout (a time that does
not give the table's TFLOPs is refused); the committed CSV is checked for its source line
and its row count per table."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import tt_gemm_flops  # noqa: E402

OOB = """<summary><strong>N150 Out of Box Results</strong> (click to expand)</summary>

| M | K | N | Use Trace | Grid Size | In0 Storage Type | In1 Storage Type | Out Storage Type | Dtype | Math Fidelity | Inference Time Avg [ns] | TFLOPs (avg) | Host Based Utilization[%] | Device Based Utilization[%] |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 2048 | 2048 | 2048 | True | (8, 8) | DRAM | DRAM | DRAM | DataType.BFLOAT16 | MathFidelity.HiFi2 | {t} | 57.47 | 43.85 | 66.74 |
"""
TUNED = """<summary><strong>P150 Manually Tuned Configurations (11×10 grid)</strong></summary>

| m | k | n | use_trace | grid_size | in0_sharded | out_sharded | in0_storage_type | in1_storage_type | out_storage_type | dtype | math_fidelity | inference_time_avg [ns] | TFLOPs (avg) | Host based utilization[%] | Device based utilization[%] |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 640 | 704 | 704 | True | (11, 10) | True | True | L1 | DRAM | L1 | DataType.BFLOAT4_B | MathFidelity.LoFi | 10592.94 | 59.89 | 9.85 | 11.38 |
"""


def test_parse_maps_both_table_layouts():
    rows = tt_gemm_flops.parse(OOB.format(t="298922.06") + TUNED)
    assert [r["card"] for r in rows] == ["N150", "P150"]
    oob, tuned = rows
    assert oob["config"] == "out_of_box" and oob["grid_size"] == "8x8"
    assert oob["in0_sharded"] == "False" and oob["dtype"] == "BFLOAT16"
    assert oob["math_fidelity"] == "HiFi2" and oob["inference_time_avg_ns"] == "298922.06"
    assert tuned["config"] == "hand_tuned" and tuned["grid_size"] == "11x10"
    assert tuned["in0_sharded"] == "True" and tuned["in0_storage_type"] == "L1"
    assert list(tuned) == tt_gemm_flops.COLUMNS


def test_a_time_that_breaks_the_tflops_identity_is_refused():
    with pytest.raises(tt_gemm_flops.ParseError, match="TFLOPs"):
        tt_gemm_flops.parse(OOB.format(t="289922.06"))


def test_committed_csv_has_every_published_row():
    path = ROOT / "benchmarks" / "data" / "tt_gemm_flops.csv"
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# source:") and tt_gemm_flops.SOURCE_COMMIT in lines[0]
    rows = list(csv.DictReader(lines[1:]))
    assert len(rows) == tt_gemm_flops.EXPECTED_ROWS
    count: dict = {}
    for r in rows:
        key = (r["card"], r["config"], r["grid_size"])
        count[key] = count.get(key, 0) + 1
    assert count == {("N150", "out_of_box", "8x8"): 78, ("N150", "hand_tuned", "8x8"): 156,
                     ("P150", "out_of_box", "13x10"): 78, ("P150", "out_of_box", "11x10"): 78,
                     ("P150", "hand_tuned", "13x10"): 156, ("P150", "hand_tuned", "11x10"): 156}
