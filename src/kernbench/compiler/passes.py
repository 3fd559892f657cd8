"""Pass infrastructure (TVM / xDSL style): small named passes run by a PassManager.

A pass is a frozen dataclass with a `name` and `apply(state) -> state`. The manager runs
them in order, verifies after every pass (the IR verifier while the state is IR, the
TileGraph checks afterwards), times each one, and can dump the state after a named pass
(`--dump-after PASS`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Pass(Protocol):
    name: str

    def apply(self, state: Any) -> Any: ...


@dataclass
class PassTiming:
    name: str
    seconds: float


@dataclass
class PassManager:
    passes: list[Any]
    verify: bool = True
    dump_after: tuple[str, ...] = ()
    dump_dir: Path | None = None
    progress: Any = None  # callable(name) for a progress display
    timings: list[PassTiming] = field(default_factory=list)

    def run(self, state: Any) -> Any:
        names = [p.name for p in self.passes]
        for d in self.dump_after:
            if d not in names:
                from kernbench.errors import InputError

                raise InputError(f"no pass named '{d}' (passes: {', '.join(names)})",
                                 field="--dump-after")
        for p in self.passes:
            if self.progress is not None:
                self.progress(p.name)
            t0 = time.perf_counter()
            state = p.apply(state)
            if self.verify:
                state.verify(after=p.name)
            self.timings.append(PassTiming(p.name, time.perf_counter() - t0))
            if p.name in self.dump_after:
                out = (self.dump_dir or Path(".")) / f"after-{p.name}.txt"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(state.dump(), encoding="utf-8")
        return state
