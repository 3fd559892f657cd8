"""A run's data pass saved with --save-oplog replays alone (fresh executor, no compiler,
no timing pass) to the run's own outputs, through the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernbench.cli import main
from kernbench.host.replay import first_difference, replay
from kernbench.ir.model import load_weights, save_weights

ROOT = Path(__file__).resolve().parents[2]


def test_gpt2_run_replays_to_identical_outputs(tmp_path, capsys):
    run_out, saved, rep_out = tmp_path / "run", tmp_path / "oplog", tmp_path / "replay"
    assert main(["run", str(ROOT / "tests/models/gpt2.onnx"), "--topology", "small",
                 "--verify", "--no-report", "--no-trace", "--save-oplog", str(saved),
                 "--out", str(run_out)]) == 0
    assert (saved / "oplog.json").exists() and (saved / "memory_store.npz").exists()
    capsys.readouterr()
    assert main(["replay", str(saved), "--out", str(rep_out)]) == 0
    n = len(load_weights(run_out / "outputs.npz"))
    arrays = f"{n} array" + ("" if n == 1 else "s")
    assert capsys.readouterr().out == f"replay: bit-identical to the saved outputs ({arrays})\n"
    with np.load(run_out / "outputs.npz") as a, np.load(rep_out / "outputs.npz") as b:
        assert sorted(a.files) == sorted(b.files) and a.files
        for k in a.files:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert (run_out / "outputs.npz").read_bytes() == (rep_out / "outputs.npz").read_bytes()
    outs, _ = replay(saved)  # twice from the same folder: the same numbers
    with np.load(rep_out / "outputs.npz") as b:
        assert all(np.array_equal(outs[k], b[k]) for k in outs)
    # a saved run whose outputs differ in one element: the verdict names it, exit 1
    vals = load_weights(saved / "outputs.npz")
    name = sorted(vals)[0]
    bad = vals[name].copy()
    flat = bad.reshape(-1)
    flat[3] = flat[3] + 1
    save_weights({**vals, name: bad}, saved / "outputs.npz")
    assert main(["replay", str(saved), "--out", str(rep_out)]) == 1
    idx = [int(i) for i in np.unravel_index(3, bad.shape)]
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"replay: differs from the saved outputs: output '{name}', "
                           f"index {idx}: replayed ")
    assert line.endswith(f"saved {flat[3]}")


def test_first_difference_is_bitwise():
    a = np.array([[1.0, np.nan], [0.0, 2.0]], np.float32)
    assert first_difference(a, a.copy()) is None  # the same NaN is the same bits
    b = a.copy()
    b[1, 0] = -0.0  # equal as numbers, different bits
    assert first_difference(a, b) == "index [1, 0]: replayed 0.0, saved -0.0"
    assert first_difference(a, a.astype(np.float64)).startswith("replayed float32[2, 2], saved float64")


def test_replay_refuses_a_folder_that_is_not_a_saved_run(tmp_path):
    assert main(["replay", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def test_save_oplog_needs_the_data_pass(tmp_path):
    assert main(["run", str(ROOT / "tests/models/gpt2.onnx"), "--topology", "small",
                 "--no-report", "--no-trace", "--save-oplog", str(tmp_path / "l"),
                 "--out", str(tmp_path / "o")]) == 2
