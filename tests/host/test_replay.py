"""A run's data pass saved with --save-oplog replays alone (fresh executor, no compiler,
no timing pass) to the run's own outputs, through the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernbench.cli import main
from kernbench.host.replay import replay

ROOT = Path(__file__).resolve().parents[2]


def test_gpt2_run_replays_to_identical_outputs(tmp_path):
    run_out, saved, rep_out = tmp_path / "run", tmp_path / "oplog", tmp_path / "replay"
    assert main(["run", str(ROOT / "tests/models/gpt2.onnx"), "--topology", "small",
                 "--verify", "--no-report", "--no-trace", "--save-oplog", str(saved),
                 "--out", str(run_out)]) == 0
    assert (saved / "oplog.json").exists() and (saved / "memory_store.npz").exists()
    assert main(["replay", str(saved), "--out", str(rep_out)]) == 0
    with np.load(run_out / "outputs.npz") as a, np.load(rep_out / "outputs.npz") as b:
        assert sorted(a.files) == sorted(b.files) and a.files
        for k in a.files:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert (run_out / "outputs.npz").read_bytes() == (rep_out / "outputs.npz").read_bytes()
    outs, _ = replay(saved)  # twice from the same folder: the same numbers
    with np.load(rep_out / "outputs.npz") as b:
        assert all(np.array_equal(outs[k], b[k]) for k in outs)


def test_replay_refuses_a_folder_that_is_not_a_saved_run(tmp_path):
    assert main(["replay", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def test_save_oplog_needs_the_data_pass(tmp_path):
    assert main(["run", str(ROOT / "tests/models/gpt2.onnx"), "--topology", "small",
                 "--no-report", "--no-trace", "--save-oplog", str(tmp_path / "l"),
                 "--out", str(tmp_path / "o")]) == 2
