"""Ctrl-C (and SIGTERM) always ends a command with exit 130 and an "interrupted" line, and
leaves no half-written --out behind (docs/errors.md). Subprocesses get a real SIGINT; the waits
are generous timeouts against hangs, never timing assertions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.cli.interrupt import Watchdog, _term_as_interrupt, deferred_interrupt
from kernbench.cli.outdir import MARKER, OutDir

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SWALLOW = '''
import numpy as np
import kernbench

@kernbench.jit
def stubborn(x_ptr, n):
    while True:
        try:
            while True:
                pass
        except BaseException:  # swallows KeyboardInterrupt: Ctrl-C must still end the run
            pass

def setup():
    return {"args": (kernbench.to_device(np.zeros(16, np.float32), "x"), 16), "grid": (1,)}
'''

HANG = 120  # seconds: only against a hang


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler in this process (a test worker may run with another)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from kernbench.cli import run; "
         "sys.argv[0] = 'kernbench'; run()", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a child of a background shell may inherit SIGINT ignored: restore the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))


def _wait_for(cond, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + HANG
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _stages(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if "kernbench-tmp" in p.name)


def test_sigint_ends_a_kernel_that_swallows_keyboardinterrupt(tmp_path):
    (tmp_path / "k.py").write_text(SWALLOW)
    out = tmp_path / "out"
    p = _start(["kernel", "k.py::stubborn", "--out", str(out)], tmp_path)
    try:
        _wait_for(lambda: _stages(tmp_path), "the staging folder (the kernel is running)")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted"
    assert not out.exists() and _stages(tmp_path) == []


# `run` whose simulation holds until Ctrl-C: the signal lands mid-run on any machine (a real
# gpt2 run can end before a busy test worker sends it).
HELD_RUN = """
import sys, time
from pathlib import Path
import kernbench.host.run as host_run
from kernbench.cli import run

real = host_run.simulate_bundle

def held(*a, **k):
    Path("simulating").write_text("")
    time.sleep(%d)
    return real(*a, **k)

host_run.simulate_bundle = held
sys.argv[0] = "kernbench"
run()
"""


@pytest.mark.parametrize("sig, sigint", [
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGTERM, signal.default_int_handler),  # kill, timeout, a batch scheduler
    (signal.SIGTERM, signal.SIG_IGN),  # a job started with nohup or &: SIGINT ignored
], ids=["sigint", "sigterm", "sigterm-with-sigint-ignored"])
def test_a_signal_during_a_run_leaves_no_out_and_no_stage(tmp_path, sig, sigint):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(
        [sys.executable, "-c", HELD_RUN % HANG, "run", "gpt2", "--seq-len", "8",
         "--out", str(out)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: (signal.signal(signal.SIGINT, sigint),
                            signal.signal(signal.SIGTERM, signal.SIG_DFL)))
    try:
        _wait_for(lambda: (tmp_path / "simulating").exists() or p.poll() is not None,
                  "the simulation to start")
        assert p.poll() is None, p.communicate()[1]
        assert _stages(tmp_path), "the run stages its output while it runs"
        p.send_signal(sig)
        _, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert not out.exists() and _stages(tmp_path) == []


def _interrupt_on_call(monkeypatch, name: str) -> None:  # noqa: ANN001
    """The first os.<name> call in cli.outdir gets a real SIGINT first (Ctrl-C in the
    middle of moving the run into --out)."""
    import kernbench.cli.outdir as od

    real = getattr(os, name)
    fired = []

    def hit(*a, **k):  # noqa: ANN002, ANN003, ANN202
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(od.os, name, hit)


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "existing-dir"])
def test_sigint_while_moving_into_out_takes_effect_after_the_move(tmp_path, monkeypatch,
                                                                  existing, default_sigint):
    out = tmp_path / "out"
    if existing:
        with OutDir(out) as stage:
            (stage / "old.txt").write_text("old")
    _interrupt_on_call(monkeypatch, "replace" if existing else "rename")
    with pytest.raises(KeyboardInterrupt), OutDir(out) as stage:
        for i in range(5):
            (stage / f"f{i}.txt").write_text(str(i))
    # the move completed whole: every file, the marker, no stale file, no stage
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER] + [f"f{i}.txt"
                                                                      for i in range(5)])
    assert _stages(tmp_path) == []


def test_sigint_while_the_stage_is_made_leaves_no_stage(tmp_path, monkeypatch, default_sigint):
    """A Ctrl-C that lands while OutDir makes its stage is held until the stage is
    registered, then raised inside __enter__, where `with` calls no __exit__: the stage
    is removed there, and nothing is left registered."""
    import kernbench.cli.interrupt as intr
    import kernbench.cli.outdir as od

    real = od._fresh_dir

    def made_then_hit(*a, **k):  # noqa: ANN002, ANN003, ANN202
        stage = real(*a, **k)
        os.kill(os.getpid(), signal.SIGINT)
        return stage

    monkeypatch.setattr(od, "_fresh_dir", made_then_hit)
    with pytest.raises(KeyboardInterrupt), OutDir(tmp_path / "out"):
        raise AssertionError("the body must not run")
    assert _stages(tmp_path) == [] and not (tmp_path / "out").exists()
    assert intr._stages == set()


def test_an_interrupted_command_removes_the_stages_still_registered(tmp_path):
    """Wherever the interrupt landed, the command's exit path (`_interrupted`) removes
    every staging folder still registered."""
    import kernbench.cli as cli
    from kernbench.cli.interrupt import register_stage

    stage = tmp_path / ".out.kernbench-tmp-0"
    (stage / "sub").mkdir(parents=True)
    (stage / "sub" / "f.txt").write_text("half")
    register_stage(stage)
    assert cli._interrupted() == 130
    assert not stage.exists()


def test_deferred_interrupt_holds_sigint_until_the_block_ends(default_sigint):
    seen = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        seen.append("after the signal, inside the block")
    assert seen == ["after the signal, inside the block"]


@pytest.mark.parametrize("pes", ["0", "-3", "5"])
def test_kernel_refuses_a_pe_count_the_npu_does_not_have(tmp_path, capsys, pes):
    bench = Path(__file__).resolve().parents[2] / "benches" / "vector_add.py"
    code = main(["kernel", f"{bench}::add_kernel", "--pes", pes, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"error: field '--pes': want 1..4 (the PEs of 'small'), got {pes}"]
    assert not (tmp_path / "o").exists()


LOST = """
import sys, time
from kernbench.cli.interrupt import Watchdog

class RaisesOnDel:
    def __init__(self, exc):
        self.exc = exc
    def __del__(self):
        raise self.exc

with Watchdog(grace_s=60):
    RaisesOnDel(ValueError("boom"))  # still reported as before
    RaisesOnDel(KeyboardInterrupt())  # Python cannot raise it here
    time.sleep(100)
print("ran on")
"""


@pytest.mark.parametrize("sigint", [signal.default_int_handler, signal.SIG_IGN],
                         ids=["ctrl-c", "sigterm-with-sigint-ignored"])
def test_a_ctrl_c_python_cannot_raise_ends_the_command_at_once(tmp_path, sigint):
    """A KeyboardInterrupt Python cannot raise (here: in a finalizer) is neither reported
    as "Exception ignored ... Traceback" nor lost: the watchdog ends the command with 130
    without waiting for its grace period. Other unraisable errors are reported as before.
    Where SIGINT is ignored (`nohup`, `&`) only SIGTERM raises it, and it is watched too."""
    p = subprocess.run([sys.executable, "-c", LOST], capture_output=True, text=True,
                       timeout=HANG, cwd=tmp_path,
                       preexec_fn=lambda: (signal.signal(signal.SIGINT, sigint),
                                           signal.signal(signal.SIGTERM, signal.SIG_DFL)))
    assert p.returncode == 130, p.stderr
    assert "ran on" not in p.stdout
    assert p.stderr.count("Exception ignored") == 1 and "ValueError: boom" in p.stderr
    assert "KeyboardInterrupt" not in p.stderr and p.stderr.rstrip().endswith("interrupted")


# ------------------------------------------------------------------------------- SIGTERM
@pytest.fixture
def default_signals(default_sigint):
    """Python's own SIGINT handler and the default SIGTERM in this process."""
    old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, old)


def test_sigterm_is_held_back_like_ctrl_c_and_the_handler_is_restored(default_signals):
    with Watchdog():
        # the handler in place first: the default SIGTERM would end this test process
        assert signal.getsignal(signal.SIGTERM) is _term_as_interrupt
        seen = []
        with pytest.raises(KeyboardInterrupt), deferred_interrupt():
            signal.raise_signal(signal.SIGTERM)
            seen.append("the block ran on")
        assert seen == ["the block ran on"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_sigterm_handler_of_the_caller_is_left_alone(default_signals):
    def own(signum, frame):  # noqa: ANN001
        own.calls += 1
    own.calls = 0
    signal.signal(signal.SIGTERM, own)
    with Watchdog():
        signal.raise_signal(signal.SIGTERM)
    assert own.calls == 1 and signal.getsignal(signal.SIGTERM) is own
