"""Progress bars: shown only after DELAY_S on a terminal, never otherwise."""

from __future__ import annotations

import io
import time

from rich.console import Console

from kernbench.cli import progress


def _phases(monkeypatch, tty: bool, enabled: bool = True) -> tuple[progress.Phases, io.StringIO]:
    buf = io.StringIO()
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: tty, raising=False)
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    monkeypatch.setattr(progress, "POLL_S", 0.02)
    con = Console(file=buf, force_terminal=True, width=80)
    return progress.Phases(con, enabled=enabled), buf


def test_bar_appears_for_a_long_phase_on_a_tty(monkeypatch):
    ph, buf = _phases(monkeypatch, tty=True)
    done = [0]
    deadline = time.monotonic() + 60  # only against a hang: a busy machine may be slow
    with ph.phase("simulate", total=10, poll=lambda: done[0]):
        for i in range(10):
            done[0] = i + 1
            time.sleep(0.03)
        while "simulate" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.03)  # the phase outlives DELAY_S until the bar is drawn
    assert "simulate" in buf.getvalue()


def test_no_bar_for_a_short_phase(monkeypatch):
    ph, buf = _phases(monkeypatch, tty=True)
    with ph.phase("simulate", total=10, poll=lambda: 0):
        pass
    assert buf.getvalue() == ""


def test_no_bar_without_a_tty_or_with_quiet(monkeypatch):
    for tty, enabled in ((False, True), (True, False)):
        ph, buf = _phases(monkeypatch, tty=tty, enabled=enabled)
        with ph.phase("simulate", total=10, poll=lambda: 0):
            time.sleep(0.2)
        assert buf.getvalue() == ""
