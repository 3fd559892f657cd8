"""CLI conventions (docs/errors.md): results on stdout, --json, --version, --out staging
and stale files, refusals with exit 2, Ctrl-C → 130 "interrupted", the tl op budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kernbench
from kernbench.cli import main
from kernbench.cli.outdir import MARKER

ROOT = Path(__file__).resolve().parents[2]
GPT2 = str(ROOT / "tests" / "models" / "gpt2.onnx")

LOOP_KERNEL = '''
import kernbench
import kernbench.tl as tl
import numpy as np


@kernbench.jit
def spin(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    while True:  # never ends: only the op budget or Ctrl-C stops it
        x = tl.load(x_ptr + offs)


def setup():
    x = kernbench.to_device(np.zeros(16, np.float32))
    return {"args": (x,), "meta": {"BLOCK": 16}, "grid": (1,)}
'''


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_version_on_stdout(capsys):
    assert main(["--version"]) == 0
    from kernbench.native import core_kind

    assert capsys.readouterr().out.strip() == (
        f"kernbench {kernbench.__version__} (simulator core: {core_kind()})")


def test_summary_on_stdout_and_json(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", GPT2, "--out", str(out), "--quiet"]) == 0
    cap = capsys.readouterr()
    # stdout: the summary once; summary.txt: the same text, then the whole layer table
    assert (out / "summary.txt").read_text().startswith(cap.out)
    assert "op_type" in (out / "summary.txt").read_text() and "op_type" not in cap.out
    assert cap.out.startswith("total ") and "engine utilization" not in cap.out
    assert main(["run", GPT2, "--out", str(out), "--quiet", "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out) == json.loads((out / "stats.json").read_text())


def test_out_replaces_and_removes_stale_files(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", GPT2, "--out", str(out), "--verify", "--trace", "--quiet"]) == 0
    assert {"outputs.npz", "verification.json", "trace.json", MARKER} <= {
        p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")  # a user's file in our folder is left alone
    assert main(["run", GPT2, "--out", str(out), "--quiet", "--keep-bundle"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "outputs.npz" not in names and "verification.json" not in names
    assert "trace.json" not in names and "notes.txt" in names
    assert (out / "bundle" / "cmdq.json").exists()
    assert main(["run", GPT2, "--out", str(out), "--quiet"]) == 0
    assert not (out / "bundle").exists()  # the old bundle was ours: removed
    assert not list(tmp_path.glob(".*kernbench-tmp*"))  # no staging folder left behind


def test_out_refusals(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["run", GPT2, "--out", str(f)]) == 2
    assert "exists and is not a folder" in _one_line(capsys.readouterr().err)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.csv").write_text("1,2")
    assert main(["run", GPT2, "--out", str(foreign)]) == 2
    assert MARKER in _one_line(capsys.readouterr().err)
    assert [p.name for p in foreign.iterdir()] == ["data.csv"]
    assert main(["run", GPT2, "--out", str(f / "sub")]) == 2
    assert "is not a folder" in _one_line(capsys.readouterr().err)


def test_failed_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    bad = tmp_path / "q.yaml"
    bad.write_text("default: {weight: 3}\n")
    assert main(["run", GPT2, "--out", str(out), "--qconfig", str(bad)]) == 2
    _one_line(capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.glob(".*kernbench-tmp*"))


def test_op_budget_ends_an_endless_kernel(tmp_path, capsys):
    k = tmp_path / "loop.py"
    k.write_text(LOOP_KERNEL)
    out = tmp_path / "o"
    assert main(["kernel", f"{k}::spin", "--max-ops", "2000", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "budget of 2000 tl operations" in line and f"{k}:11" in line
    assert not out.exists()


def _kernbench(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    code = "import sys; from kernbench.cli import main; sys.exit(main(sys.argv[1:]))"
    # SIGINT back to its default: a shell may start background jobs with it ignored
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_in_a_kernel_exits_130(tmp_path):
    k = tmp_path / "loop.py"
    k.write_text(LOOP_KERNEL)
    p = _kernbench("kernel", f"{k}::spin", "--max-ops", "1000000000", "--out",
                   str(tmp_path / "o"))
    try:
        # the kernel is running once the launch line is printed; give it a moment more
        line = ""
        while "grid" not in line:
            line = p.stderr.readline()
            assert line, "the kernel did not start"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)  # only against a hang: no wall-clock assertion
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert not (tmp_path / "o").exists()
