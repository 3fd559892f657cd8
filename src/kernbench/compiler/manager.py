"""The pass manager (TVM / xDSL style): small named passes run in order, checked after each.

A pass is a frozen dataclass with a `name`, two class-level declarations and one method:

    @dataclass(frozen=True)
    class MyPass:
        name: str = "my_pass"
        changes_ir: ClassVar[bool] = False           # the IR verifier runs after it if True
        produces: ClassVar[tuple[str, ...]] = ()     # invariants to check (checks.CHECKS)
        def apply(self, state: CompileState) -> CompileState: ...

`apply` may mutate the state it is given (the passes do: copying the graph and the
TileGraph per pass would cost more than the whole compile of a small model) and returns
it. The manager then, unless `verify=False`: runs `kernbench.ir.verify` if the pass
changes the IR, and the checks of everything it produces (TileGraph structure, program
order, TCM no-overlap / no-overflow, dependencies, CMDQ entries). It records the time of
each pass in `timings` (pass name → seconds in `apply`) and of its checks in
`check_timings`, and writes `after-<pass>.txt` (`state.dump()`) into `dump_dir` after
every pass named in `dump_after`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from kernbench.compiler.checks import CHECKS, check_ir
from kernbench.compiler.state import CompileState
from kernbench.errors import InputError


class Pass(Protocol):
    name: str
    changes_ir: ClassVar[bool]
    produces: ClassVar[tuple[str, ...]]

    def apply(self, state: CompileState) -> CompileState: ...


@dataclass
class PassManager:
    passes: Sequence[Pass]
    verify: bool = True
    dump_after: tuple[str, ...] = ()
    dump_dir: Path | None = None
    progress: Callable[[str], None] | None = None  # called with each pass name
    timings: dict[str, float] = field(default_factory=dict)
    check_timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [p.name for p in self.passes]
        if len(set(names)) != len(names):
            raise ValueError(f"pass names must be unique: {names}")
        for p in self.passes:
            unknown = [c for c in p.produces if c not in CHECKS]
            if unknown:
                raise ValueError(f"pass {p.name}: no check named {unknown}")

    def run(self, state: CompileState) -> CompileState:
        """Run every pass on `state`, checking, timing and dumping as configured."""
        names = [p.name for p in self.passes]
        for d in self.dump_after:
            if d not in names:
                raise InputError(f"no pass named '{d}' (passes: {', '.join(names)})",
                                 field="--dump-after")
        for p in self.passes:
            if self.progress is not None:
                self.progress(p.name)
            t0 = time.perf_counter()
            state = p.apply(state)
            t1 = time.perf_counter()
            if self.verify:
                self._check(p, state)
            self.timings[p.name] = t1 - t0
            self.check_timings[p.name] = time.perf_counter() - t1
            if p.name in self.dump_after:
                out = (self.dump_dir or Path(".")) / f"after-{p.name}.txt"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(state.dump(), encoding="utf-8")
        return state

    @staticmethod
    def _check(p: Pass, state: CompileState) -> None:
        if p.changes_ir:
            check_ir(state)
        for product in p.produces:
            CHECKS[product](state)

    def timing_lines(self) -> list[str]:
        """One line per pass: name, time in the pass, time in its checks (milliseconds)."""
        lines = [f"  {'pass':10s} {'ms':>8s} {'checks ms':>10s}"]
        for name, s in self.timings.items():
            lines.append(f"  {name:10s} {1000 * s:8.1f} {1000 * self.check_timings[name]:10.1f}")
        lines.append(f"  {'total':10s} {1000 * sum(self.timings.values()):8.1f} "
                     f"{1000 * sum(self.check_timings.values()):10.1f}")
        return lines
