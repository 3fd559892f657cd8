"""`kernbench kernel FILE.py::NAME`: runs, verifies, writes stats/trace; errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_cli_runs_and_verifies(tmp_path, capsys):
    rc = main(["kernel", f"{ROOT}/benches/vector_add.py::add_kernel", "--grid", "10",
               "--topology", "small", "--set", "cube.hbm_ctrl.channel_bw_gbs=16", "--trace",
               "--out", str(tmp_path)])
    assert rc == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["kernel"]["grid"] == [10] and stats["verify"]["allclose"]
    assert (tmp_path / "trace.json").exists()


def test_kernel_cli_bad_target(tmp_path, capsys):
    assert main(["kernel", f"{ROOT}/benches/vector_add.py::nope", "--out", str(tmp_path)]) == 2
    assert "not a @kernbench.jit kernel" in capsys.readouterr().err
    assert main(["kernel", "missing.py::k", "--out", str(tmp_path)]) == 2
