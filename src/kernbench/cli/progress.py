"""Progress bars (rich, on stderr) for the long phases: compile, simulate, data pass.

A bar appears only when a phase has run for more than `DELAY_S` seconds, only when stderr
is a terminal, and never with `--quiet`: short runs, pipes and CI logs stay clean. The
bar is drawn by a daemon thread that polls a counter the phase exposes (entries done,
ops executed), so the simulator itself never waits on the display.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

DELAY_S = 2.0
POLL_S = 0.2


class Phases:
    """`phases.phase(name, total, poll)` context managers, shown or not as above.

    `update(description)` renames the running phase (the compiler's pass names)."""

    def __init__(self, console: Any, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled and sys.stderr.isatty()
        self._desc = ""

    def update(self, description: str) -> None:
        self._desc = description

    @contextlib.contextmanager
    def phase(self, name: str, total: int | None = None,
              poll: Callable[[], int] | None = None) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        self._desc = ""
        done = threading.Event()
        th = threading.Thread(target=self._show, args=(name, total, poll, done), daemon=True)
        th.start()
        try:
            yield
        finally:
            done.set()
            th.join(timeout=1.0)

    def _show(self, name: str, total: int | None, poll: Callable[[], int] | None,
              done: threading.Event) -> None:
        if done.wait(DELAY_S):
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        cols = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
        if total:
            cols.insert(2, MofNCompleteColumn())
        with Progress(*cols, console=self.console, transient=True,
                      redirect_stdout=False, redirect_stderr=False) as prog:
            task = prog.add_task(name, total=total or None)
            while not done.wait(POLL_S):
                desc = f"{name} {self._desc}".strip()
                try:
                    n = poll() if poll is not None else None
                except Exception:  # a counter read mid-update: skip this tick
                    n = None
                prog.update(task, description=desc, completed=n)
        time.sleep(0)


def no_phases() -> Phases:
    """A Phases that shows nothing (library use, tests)."""
    return Phases(None, enabled=False)
