"""Sync and control opcodes (spec §10): BARRIER, NOP, END. They are Control-FSM entries,
not PE commands, and move or compute no data."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.opcodes.base import NO_DATA, NonNegInt, Opcode
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.program import ProgramEntry


@register_opcode
class Barrier(Opcode):
    """Nothing after the barrier issues until every entry of ``wait_for`` completed (§10.1)."""

    engine: ClassVar[str] = "sync"
    since: ClassVar[str] = "1.0"
    control: ClassVar[str] = "barrier"
    data: ClassVar[str] = NO_DATA
    opcode: Literal["BARRIER"] = "BARRIER"
    wait_for: list[NonNegInt] = Field(
        default_factory=list, description="Ids of earlier entries to wait for."
    )

    def wait_ids(self) -> list[int]:
        return [*self.deps_before, *self.wait_for]

    def control_entry(self, deps: tuple[int, ...], label: str) -> ProgramEntry:
        # the Control FSM holds issue at a barrier until everything it names completed
        return ProgramEntry(self.id, "barrier", deps=(), wait_for=deps, label=label)


@register_opcode
class Nop(Opcode):
    """Does nothing (§10.2)."""

    since: ClassVar[str] = "1.0"
    control: ClassVar[str] = "nop"
    data: ClassVar[str] = NO_DATA
    opcode: Literal["NOP"] = "NOP"


@register_opcode
class End(Opcode):
    """Ends the program; must be the last entry (§10.3)."""

    since: ClassVar[str] = "1.0"
    control: ClassVar[str] = "end"
    data: ClassVar[str] = NO_DATA
    opcode: Literal["END"] = "END"
