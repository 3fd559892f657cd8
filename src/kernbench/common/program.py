"""A program for the cube's command processor (M_CPU): the Control FSM's view of a CMDQ.

The CMDQ layer translates its JSON entries into ProgramEntry objects; M_CPU executes them
without knowing the CMDQ format. Kinds: "command" (send `command` to PE `pe`), "barrier"
(stop fetching until `wait_for` complete), "nop", "end" (stop fetching; the program ends
when everything issued has completed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernbench.common.pe_commands import PeCommand


@dataclass(slots=True, eq=False)
class ProgramEntry:
    id: int
    kind: str
    pe: int = 0
    command: PeCommand | None = None
    deps: tuple[int, ...] = ()
    wait_for: tuple[int, ...] = ()
    label: str = ""
    # filled in by the simulation
    fetch_ns: float | None = None
    issue_ns: float | None = None
    start_ns: float | None = None
    end_ns: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
