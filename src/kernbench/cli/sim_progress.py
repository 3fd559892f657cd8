"""Rich progress on stderr while a long simulation runs: commands and layers done, ETA.

`simulation_watch(console)` returns a `watch(SimWatch)` for host.simulate: a daemon thread
polls how many CMDQ entries and layers are done (it only reads) and advances a rich progress bar; the
bar only appears for programs of at least MIN_ENTRIES entries.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:  # the host is imported when a run starts
    from kernbench.host.simulate import SimWatch
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

MIN_ENTRIES = 2000
POLL_S = 0.5


def simulation_watch(console: Console) -> Any:
    def watch(w: SimWatch) -> Any:
        """`w`: a host.simulate.SimWatch (entries, layers, poll() → (done, layers done))."""
        if w.entries < MIN_ENTRIES:
            return lambda: None
        prog = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("commands, {task.fields[layers]} layers done"),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        console=console, transient=True)
        task = prog.add_task("sim", total=w.entries, layers=f"0/{w.layers}")
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(POLL_S):
                done, finished = w.poll()
                prog.update(task, completed=done, layers=f"{finished}/{w.layers}")

        prog.start()
        th = threading.Thread(target=poll, daemon=True)
        th.start()

        def end() -> None:
            stop.set()
            th.join()
            prog.stop()

        return end

    return watch
