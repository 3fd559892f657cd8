"""CMDQ meets the hardware: entries → Control-FSM program entries.

Each CMDQ entry becomes one `ProgramEntry` for the cube's M_CPU. What an opcode lowers to
is its class's business (`kernbench.cmdq.opcodes`: ``command`` for PE commands,
``control_entry`` for BARRIER / NOP / END); this module walks the program, resolves PEs
and dependencies, and asks each entry for its data description when a data environment
is given.
"""

from __future__ import annotations

from typing import Protocol

from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.opcodes.base import NO_DATA, Lowering, Opcode, TcmDataEnv
from kernbench.cmdq.schema import CmdqProgram, program_predecessors
from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import ProgramEntry
from kernbench.topology.model import Topology


class DataAttacher(Protocol):
    """The host's side of the data pass (`host.bundle.DataContext`): given an entry and its
    command, attach the command's ``"data"`` description."""

    def attach(self, e: Opcode, cmd: PeCommand, pe_id: str, bank_bytes: int) -> None: ...


class TcmData:
    """A `DataAttacher` for programs of tile opcodes only (no IR layers): each command gets
    its opcode's data description, addressed in its PE's TCM."""

    def attach(self, e: Opcode, cmd: PeCommand, pe_id: str, bank_bytes: int) -> None:
        desc = e.data(TcmDataEnv(e, pe_id, bank_bytes))
        if desc is not None:
            cmd.params["data"] = desc


def limits_for(topology: Topology) -> CmdqLimits:
    """What a CMDQ program may address on `topology` (`CmdqLimits.for_topology`)."""
    return CmdqLimits.for_topology(topology)


def engine_of(entry: Opcode, pe_id: str) -> str | None:
    """The component that does the entry's work (for stats)."""
    return entry.unit(pe_id)


def to_program(program: CmdqProgram, topology: Topology,
               limits: CmdqLimits | None = None,
               data: DataAttacher | None = None) -> list[ProgramEntry]:
    """Translate a validated program into Control-FSM entries.

    With `data` (a `DataAttacher`), every command also carries its `"data"` description
    for the op log (each opcode's ``data`` semantics)."""
    limits = limits or limits_for(topology)
    bank = limits.tcm_bank_bytes
    staging_bytes = topology.config.cube.pe_template.pe_tcm.reserved_kib * 1024
    preds = program_predecessors(program)  # deps_before ∪ wait_for ∪ reversed deps_after
    out: list[ProgramEntry] = []
    for e in program.cmdq:
        deps = tuple(preds[e.id])
        label = f"#{e.id} {e.opcode}"
        control = e.control_entry(deps, label)
        if control is not None:
            out.append(control)
            continue
        pe = limits.pe_index(e.pe)
        meta = {"entry_id": e.id, "layer_id": e.layer_id}
        cmd = e.command(Lowering(pe, label, bank, staging_bytes, meta))
        if data is not None and e.data != NO_DATA:
            data.attach(e, cmd, topology.pes[pe].id, bank)
        out.append(ProgramEntry(e.id, "command", pe=pe, command=cmd, deps=deps, label=label))
    return out
