"""Issue 39 item 7 (parts): `kernel` prints the problem size and the rate achieved;
`topology show --json` carries the computed peaks and area the text form prints, and
still loads back as a topology file."""

from __future__ import annotations

import json
from pathlib import Path

from kernbench.cli import main
from kernbench.config import load_topology_config
from kernbench.report.units import fmt_time
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_prints_problem_size_and_tflops(tmp_path, capsys):
    assert main(["kernel", str(ROOT / "benches/matmul.py::matmul_kernel"), "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    total = json.loads((tmp_path / "stats.json").read_text())["total_ns"]
    m, n, k = 200, 136, 120  # benches/matmul.py setup()'s defaults
    assert f"problem: a[{m}×{k}] float16, b[{k}×{n}] float16, " in out
    flops = 2 * m * n * k
    rate = flops / total / 1e3  # FLOP per ns = GFLOP/s; / 1e3 = TFLOPS
    assert (f"rate: {flops:,} operations, {2 * (m * k + k * n + m * n):,} bytes in "
            f"{fmt_time(total)} = {rate:.4g} TFLOPS achieved (16-bit)") in out


def test_topology_json_has_peaks_and_area_and_loads_back(tmp_path, capsys):
    assert main(["topology", "show", "base"]) == 0
    text = capsys.readouterr().out
    assert main(["topology", "show", "base", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    comp = doc["computed"]
    topo = load_topology("base")
    cfg = topo.config
    g = cfg.cube.pe_template.pe_gemm
    pes = len(topo.pes)
    # an independent closed form: rows × cols × clock × 2 ops per MAC × PEs at int8
    int8 = g.rows * g.cols * g.clock_ghz * g.throughput_factor.get(8, 1.0) * 2 * pes / 1e3
    assert comp["peaks"]["tops"]["int8"] == round(int8, 1)
    hbm = cfg.cube.hbm_ctrl
    cubes = len(topo.cubes)
    assert comp["peaks"]["hbm_bytes"] == round(hbm.capacity_gib * 2**30) * cubes
    assert comp["peaks"]["pes"] == pes and comp["peaks"]["cubes"] == cubes
    assert f"die area {comp['area_mm2']['total']:.2f} mm²" in text
    assert f"{comp['peaks']['tops']['int8']:.1f} int8" in text
    f = tmp_path / "base.json"
    f.write_text(json.dumps(doc))
    assert load_topology_config(str(f)) == cfg  # the computed section is derived: dropped
