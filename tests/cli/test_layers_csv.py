"""layers.csv (issue 39 item 7): one row per layer of stats.json's `layers`, the same values;
the bytes per memory level are the action ledger's, whose totals stats.json keeps in
`energy.actions`; a run without layers (a tl kernel) writes none."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from kernbench.cli import main
from kernbench.report.layers_csv import COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def _read(out: Path) -> tuple[dict, list[dict[str, str]]]:
    stats = json.loads((out / "stats.json").read_text())
    with open(out / "layers.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return stats, rows


def _check_rows(stats: dict, rows: list[dict[str, str]]) -> None:
    layers = stats["layers"]
    assert [r["layer"] for r in rows] == sorted(layers)
    for r in rows:
        v = layers[r["layer"]]
        assert r["op_type"] == v["op_type"] and r["bound_by"] == v["bound_by"]
        assert float(r["ns"]) == v["ns"] and float(r["busy_ns"]) == v["busy_ns"]
        assert int(r["cycles"]) == round(v["ns"] * stats["clock_ghz"])
        assert int(r["macs"]) == v["macs"] and int(r["compulsory_hbm_bytes"]) == v["bytes"]
        for col in ("compute_bound_ns", "memory_bound_ns", "bound_ns", "roofline_fraction",
                    "energy_pj"):
            assert float(r[col]) == v[col], col
        assert int(r["hbm_bytes"]) == v["traffic_bytes"]["hbm"]
        assert int(r["tcm_bytes"]) == v["traffic_bytes"]["tcm"]
        assert int(r["shared_sram_bytes"]) == v["traffic_bytes"]["shared_sram"]
        assert r["bound_by"] == ("compute" if v["compute_bound_ns"] >= v["memory_bound_ns"]
                                 else "memory")


def _ledger_sums(stats: dict, rows: list[dict[str, str]]) -> None:
    """Every HBM / SRAM / TCM byte of a compiled program is moved by some layer's entry, so
    the layers' bytes add up to the run's action totals (an independent sum: the ledger's
    grand total, not the per-layer split)."""
    acts = stats["energy"]["actions"]
    assert sum(int(r["hbm_bytes"]) for r in rows) == acts["hbm_byte"]
    assert sum(int(r["shared_sram_bytes"]) for r in rows) == acts["sram_byte"]
    assert sum(int(r["tcm_bytes"]) for r in rows) == acts["tcm_read_byte"] + acts["tcm_write_byte"]


def test_run_writes_layers_csv_equal_to_stats(tmp_path):
    out = tmp_path / "r"
    assert main(["run", "llama", "--out", str(out), "--quiet", "--no-report"]) == 0
    stats, rows = _read(out)
    assert list(rows[0]) == COLUMNS
    _check_rows(stats, rows)
    _ledger_sums(stats, rows)
    assert sum(int(r["hbm_bytes"]) for r in rows) > 0
    assert sum(int(r["macs"]) for r in rows) == sum(v["macs"] for v in stats["layers"].values())


def test_simulate_with_report_writes_the_same_columns(tmp_path):
    bundle = tmp_path / "b"
    assert main(["compile", str(ROOT / "tests" / "models" / "gpt2.onnx"), "-o", str(bundle),
                 "--quiet"]) == 0
    out = tmp_path / "s"
    assert main(["simulate", str(bundle), "--out", str(out), "--quiet"]) == 0
    stats, rows = _read(out)
    _check_rows(stats, rows)
    _ledger_sums(stats, rows)


def test_kernel_run_has_no_layers_csv(tmp_path):
    out = tmp_path / "k"
    assert main(["kernel", str(ROOT / "benches" / "vector_add.py") + "::add_kernel",
                 "--out", str(out), "--quiet"]) == 0
    assert (out / "stats.json").is_file() and not (out / "layers.csv").exists()
