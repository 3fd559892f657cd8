"""Rich progress on stderr while a long simulation runs: commands and layers done, ETA.

`simulation_watch(console)` returns a `watch(entries, layer_ids)` for host.simulate: a daemon thread
polls which CMDQ entries have ended (it only reads) and advances a rich progress bar; the
bar only appears for programs of at least MIN_ENTRIES entries.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console
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
    def watch(entries: list[Any], layer_of: list[str | None]) -> Any:
        if len(entries) < MIN_ENTRIES:
            return lambda: None
        layers: dict[str, int] = {}
        for lid in layer_of:
            if lid:
                layers[lid] = layers.get(lid, 0) + 1
        prog = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("commands, {task.fields[layers]} layers done"),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        console=console, transient=True)
        task = prog.add_task("sim", total=len(entries), layers=f"0/{len(layers)}")
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(POLL_S):
                left: dict[str, int] = dict(layers)
                done = 0
                for e, lid in zip(entries, layer_of, strict=True):
                    if e.end_ns is not None:
                        done += 1
                        if lid:
                            left[lid] -= 1
                finished = sum(1 for v in left.values() if v == 0)
                prog.update(task, completed=done, layers=f"{finished}/{len(layers)}")

        prog.start()
        th = threading.Thread(target=poll, daemon=True)
        th.start()

        def end() -> None:
            stop.set()
            th.join()
            prog.stop()

        return end

    return watch
