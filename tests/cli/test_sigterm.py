"""SIGTERM (`kill`, `timeout`, a batch scheduler) ends a command as Ctrl-C does: exit 130,
an "interrupted" line, no --out and no staging folder left (docs/errors.md). Subprocesses
get a real SIGTERM; the waits are generous timeouts against hangs, never timing
assertions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernbench.cli.interrupt import Watchdog, _term_as_interrupt, deferred_interrupt

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

HANG = 120  # seconds: only against a hang

# `run` whose simulation holds until the signal lands, so it lands mid-run on any machine
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


def _stages(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if "kernbench-tmp" in p.name)


@pytest.mark.parametrize("sigint", [signal.default_int_handler, signal.SIG_IGN],
                         ids=["sigint-default", "sigint-ignored-as-under-nohup"])
def test_sigterm_during_a_run_leaves_no_out_and_no_stage(tmp_path, sigint):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(
        [sys.executable, "-c", HELD_RUN % HANG, "run", "gpt2", "--seq-len", "8",
         "--out", str(out)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: (signal.signal(signal.SIGTERM, signal.SIG_DFL),
                            signal.signal(signal.SIGINT, sigint)))
    try:
        deadline = time.monotonic() + HANG
        while not (tmp_path / "simulating").exists():
            assert p.poll() is None, p.communicate()[1]
            assert time.monotonic() < deadline, "timed out waiting for the simulation"
            time.sleep(0.05)
        assert _stages(tmp_path), "the run stages its output while it runs"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert not out.exists() and _stages(tmp_path) == []


@pytest.fixture
def default_signals():
    """Python's own SIGINT handler and the default SIGTERM in this process."""
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGINT, old_int)
    signal.signal(signal.SIGTERM, old_term)


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
