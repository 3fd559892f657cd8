"""benchmarks/silicon.py on a few rows: program configs, the model's closed-form ratios,
the written table, and bad input (one line, exit 2)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import silicon  # noqa: E402
import ttmetal_matmul as tm  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402

PARAMS = {"launch_ns": 8000.0, "host_oob_ns": 50000.0, "host_tuned_ns": 130000.0,
          "noc_eff": 0.3, "tile_overhead_cycles": 5.0, "unpack_words": 1.4}


def _row(**kw) -> dict:
    r = {"card": "N150", "config": "hand_tuned", "m": "8192", "k": "8192", "n": "8192",
         "use_trace": "True", "grid_size": "8x8", "in0_sharded": "False",
         "out_sharded": "False", "in0_storage_type": "DRAM", "in1_storage_type": "DRAM",
         "out_storage_type": "DRAM", "dtype": "BFLOAT16", "math_fidelity": "HiFi4",
         "inference_time_avg_ns": "20846247.67"}
    r.update(kw)
    return r


@pytest.fixture(scope="module")
def n150() -> tm.Chip:
    return tm.Chip.from_topology(load_topology("n150"))


def test_chip_reads_the_preset(n150):
    assert n150.tile_cycles == {"LoFi": 16, "HiFi2": 32, "HiFi3": 48, "HiFi4": 64}
    assert n150.clock_ghz == 1.0 and n150.noc_gbs == 32.0 and n150.dram_gbs == 288.0


def test_out_of_box_small_m_falls_into_the_1d_in0_config(n150):
    # Mt = 16 fits one block row of the per-core factor 16: ttnn picks 1-D in0 multicast,
    # all of M on each core and N spread one tile per core over 32 cores
    p = tm.program(_row(config="out_of_box", m="512", k="1024", n="1024"), n150)
    assert (p.kind, p.cores, p.per_core_m, p.per_core_n, p.in0_block_w) == \
        ("mcast1d_in0", 32, 16, 1, 2)
    q = tm.program(_row(config="out_of_box", m="1024", k="1024", n="1024"), n150)
    assert (q.kind, q.cores_y, q.cores_x, q.per_core_m, q.in0_block_w) == ("mcast2d", 8, 8, 4, 4)


def test_compute_bound_rows_scale_with_the_fidelity_cycles(n150):
    # 8192^3 BF16 on 64 cores is compute bound. Per output block: the first K block's
    # transfer exposed, then every K block at products x (max(fidelity cycles, unpack) +
    # overhead) / clock; then the output written (the slower of a core's NoC share and
    # all cores' bytes through the DRAM banks)
    unpack = 2048 / (PARAMS["unpack_words"] * 32)
    per = {f: max(c, unpack) + PARAMS["tile_overhead_cycles"] for f, c in n150.tile_cycles.items()}
    t4, p = tm.predict_ns(_row(), n150, PARAMS, 1.0)
    t2, _ = tm.predict_ns(_row(math_fidelity="HiFi2"), n150, PARAMS, 1.0)
    h, w, kw = p.out_block_h, p.out_block_w, p.in0_block_w
    core_bw = 32.0 * PARAMS["noc_eff"]
    blocks = (p.per_core_m // h) * (p.per_core_n // w)
    first = max(h, w) * kw * 2048 / core_bw
    out_bytes = p.per_core_m * p.per_core_n * 2048
    write = max(out_bytes / core_bw, 64 * out_bytes / 288.0)  # DRAM at efficiency 1.0

    def expect(f: str) -> float:
        return blocks * (first + (256 // kw) * h * w * kw * per[f]) + write

    assert (p.per_core_m, p.per_core_n) == (32, 32)
    assert t4 - PARAMS["launch_ns"] == pytest.approx(expect("HiFi4"), rel=1e-9)
    assert t2 - PARAMS["launch_ns"] == pytest.approx(expect("HiFi2"), rel=1e-9)


def test_without_trace_the_host_floor_shows(n150):
    t, _ = tm.predict_ns(_row(m="512", k="512", n="512", use_trace="False"), n150, PARAMS, 1.0)
    assert t == PARAMS["host_tuned_ns"]


def test_main_writes_rows_with_error(tmp_path):
    rows = [_row(), _row(card="P150", grid_size="13x10", m="640", k="832", n="832",
                         inference_time_avg_ns="")]
    table = tmp_path / "t.csv"
    with table.open("w", newline="") as f:
        f.write("# a comment line\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    params = tmp_path / "p.json"
    params.write_text(json.dumps(PARAMS))
    out = tmp_path / "r.csv"
    assert silicon.main(["--table", str(table), "--out", str(out), "--params", str(params)]) == 0
    got = list(csv.DictReader(out.open()))
    assert [r["card"] for r in got] == ["N150", "P150"]
    sim, meas = float(got[0]["simulated_ns"]), float(got[0]["inference_time_avg_ns"])
    assert float(got[0]["error_pct"]) == pytest.approx(100 * (sim / meas - 1), abs=0.01)
    assert got[1]["error_pct"] == "" and float(got[1]["simulated_ns"]) > 0


@pytest.mark.parametrize("field, value, message", [
    ("card", "N300", "card 'N300'"), ("dtype", "FLOAT32", "dtype 'FLOAT32'"),
    ("m", "-3", "m '-3'"), ("grid_size", "9x9", "larger than the n150"),
])
def test_bad_rows_are_one_line_exit_2(tmp_path, capsys, field, value, message):
    table = tmp_path / "t.csv"
    row = _row(**{field: value})
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    assert silicon.main(["--table", str(table), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "o.csv").exists()


def test_kernbench_column_compiles_the_rows_own_formats(tmp_path):
    """kernbench's own compiler on the card: the weight in the row's format (a BFP4_B
    weight moves about a quarter of bf16's bytes, and this shape reads its weights from
    DRAM), the math fidelity from the row (HiFi4 takes twice HiFi2's tile cycles)."""
    shape = {"card": "N150", "m": "32", "k": "1024", "n": "1024"}
    bf16 = silicon.kernbench_ns(_row(**shape, dtype="BFLOAT16", math_fidelity="HiFi2"),
                                tmp_path)
    bfp4 = silicon.kernbench_ns(_row(**shape, dtype="BFLOAT4_B", math_fidelity="HiFi2"),
                                tmp_path)
    assert 0 < bfp4 < bf16
    q = (tmp_path / "N150-32-1024-1024-bfp4_b-HiFi2" / "q.yaml").read_text()
    assert "bfp4_b" in q and "activation: bf16" in q
    big = {"card": "N150", "m": "512", "k": "512", "n": "512", "dtype": "BFLOAT16"}
    hifi2 = silicon.kernbench_ns(_row(**big, math_fidelity="HiFi2"), tmp_path)
    hifi4 = silicon.kernbench_ns(_row(**big, math_fidelity="HiFi4"), tmp_path)
    assert hifi4 > hifi2
