"""CMDQ meets the hardware: entries → Control-FSM program entries.

Each CMDQ entry becomes one `ProgramEntry` for the cube's M_CPU. What an opcode lowers to
is its class's business (`kernbench.cmdq.opcodes`: ``command`` for PE commands,
``control_entry`` for BARRIER / NOP / END); this module walks the program, resolves PEs
and dependencies, and asks each entry for its data description when a data environment
is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, overload

from kernbench.cmdq.io import parse_chunk
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.opcodes.base import NO_DATA, Lowering, Opcode, TcmDataEnv
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.stream import EntryStream
from kernbench.cmdq.validate import EntryChecker
from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import ProgramEntry
from kernbench.topology.model import Topology


class DataAttacher(Protocol):
    """The host's side of the data pass (`host.bundle.DataContext`): given an entry and its
    command, attach the command's ``"data"`` description (`pe_ids`: every PE's id by
    index, for entries that write other PEs' TCM)."""

    def attach(self, e: Opcode, cmd: PeCommand, pe_id: str, bank_bytes: int,
               pe_ids: tuple[str, ...] = ()) -> None: ...


class TcmData:
    """A `DataAttacher` for programs of tile opcodes only (no IR layers): each command gets
    its opcode's data description, addressed in its PE's TCM."""

    def attach(self, e: Opcode, cmd: PeCommand, pe_id: str, bank_bytes: int,
               pe_ids: tuple[str, ...] = ()) -> None:
        desc = e.data(TcmDataEnv(e, pe_id, bank_bytes, pe_ids))
        if desc is not None:
            cmd.params["data"] = desc  # type: ignore[attr-defined]  # a data command's


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
    lower = _Lowerer(program, topology, limits, data)
    return [lower(i) for i in range(len(lower.entries))]


class EntryLowering:
    """One CMDQ entry → its ProgramEntry, given the entries it waits on besides its own
    `deps` / `wait_for` (`after`: the reversed `deps_after`). Needs no program: a compile
    ahead child lowers its chunks with it (`lowered_chunks`)."""

    def __init__(self, topology: Topology, limits: CmdqLimits | None = None,
                 data: DataAttacher | None = None) -> None:
        self.topology = topology
        self.limits = limits or limits_for(topology)
        self.bank = self.limits.tcm_bank_bytes
        self.staging = topology.config.cube.pe_template.pe_tcm.reserved_kib * 1024
        self.data = data
        self.pe_ids = tuple(p.id for p in topology.pes)
        self.num_pes = self.limits.num_pes

    def __call__(self, e: Opcode, after: set[int] | None = None) -> ProgramEntry:
        ident = e.id
        ids: Any = e.wait_ids()
        if after is not None:
            ids = set(ids) | after
        elif len(ids) > 1:
            ids = set(ids)
        deps = tuple(sorted(ids))
        label = f"#{ident} {e.opcode}"
        if e.control is not None:  # BARRIER / NOP / END: no PE command
            control = e.control_entry(deps, label)
            assert control is not None  # a control opcode has its entry
            return control
        pe = e.pe
        if pe.__class__ is not int or not 0 <= pe < self.num_pes:
            pe = self.limits.pe_index(pe)  # a path, None, or the error's message
        meta = {"entry_id": ident, "layer_id": e.layer_id}
        cmd = e.command(Lowering(pe, label, self.bank, self.staging, meta))
        if self.data is not None and e.data != NO_DATA:
            self.data.attach(e, cmd, self.topology.pes[pe].id, self.bank, self.pe_ids)
        return ProgramEntry(ident, "command", pe=pe, command=cmd, deps=deps, label=label)


def _entries(program: Any) -> Any:  # noqa: ANN401 - a CmdqProgram's `cmdq`, list or stream
    return program.cmdq


class _Lowerer:
    """Entry i of a validated program → its ProgramEntry (predecessors computed once). An
    entry a stream holds lowered already (`EntryStream` of `lowered_chunks`) is itself."""

    def __init__(self, program: CmdqProgram, topology: Topology, limits: CmdqLimits | None,
                 data: DataAttacher | None) -> None:
        # the program's entries: a list of models, or an EntryStream (typed loosely: compiled,
        # a read of `program.cmdq` as its declared list would refuse the stream)
        self.entries: Any = _entries(program)
        self.lower = EntryLowering(topology, limits, data)
        self.limits = self.lower.limits
        # deps_before ∪ wait_for of an entry are its own; deps_after are reversed once
        # (sparse: the compiler emits none), so entries can be lowered one at a time
        self.after: dict[int, set[int]] = {}
        if isinstance(self.entries, EntryStream):
            return  # checked, as it streams, to have no deps_after
        for e in self.entries:
            for later in e.deps_after:
                self.after.setdefault(later, set()).add(e.id)

    def __call__(self, i: int) -> ProgramEntry:
        e: Any = self.entries[i]
        if e.__class__ is ProgramEntry:
            return e
        return self.lower(e, self.after.get(i))


def lowered_chunks(chunks: Iterator[list[dict[str, Any]]], n: int, limits: CmdqLimits,
                   topology: Topology, file: str | None = None
                   ) -> Iterator[list[ProgramEntry]]:
    """Each chunk of entry dicts parsed, checked as `EntryStream` checks them (the first
    problem raised where its chunk would be read) and lowered to its Control-FSM entries.
    For a source that runs in another process (`host.compile_ahead`): the stream that reads
    the result (`EntryStream(..., checked=True, lowered=True)`) holds ProgramEntry objects,
    and neither parses nor lowers."""
    checker = EntryChecker(n, limits, file)
    lower = EntryLowering(topology, limits)
    first = 0
    for chunk in chunks:
        out = []
        for k, e in enumerate(parse_chunk(chunk, first, file=file), first):
            checker.check(k, e)
            out.append(lower(e))
        first += len(chunk)
        yield out


class StreamedProgram(Sequence[ProgramEntry]):
    """The Control-FSM entries of a program, built when the FSM first reads them and
    forgotten when it retires them (timing runs that keep no per-entry record): host
    memory holds the issue window, not the program.

    `retire(entry)` (called by M_CPU once an entry has completed) hands the entry to
    `on_retire` and drops it; with `consume`, the CMDQ entry it was built from is dropped
    from `program.cmdq` too (the caller gives the program up)."""

    def __init__(self, program: CmdqProgram, topology: Topology, limits: CmdqLimits | None,
                 on_retire: Callable[[ProgramEntry], None], *, consume: bool = False) -> None:
        self._lower = _Lowerer(program, topology, limits, None)
        self._n = len(self._lower.entries)
        self._built: dict[int, ProgramEntry] = {}
        self._on_retire = on_retire
        self._consume = consume
        self._on_build: Callable[[ProgramEntry], None] | None = None

    def on_build(self, fn: Callable[[ProgramEntry], None]) -> None:
        """Call `fn` on every entry when it is built (the simulator tracks its command)."""
        self._on_build = fn

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> ProgramEntry: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ProgramEntry]: ...

    def __getitem__(self, i: int | slice) -> ProgramEntry | Sequence[ProgramEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        e = self._built.get(i)
        if e is None:
            e = self._built[i] = self._lower(i)
            if self._on_build is not None:
                self._on_build(e)
            if self._consume:
                self._lower.entries[i] = None
        return e

    def entry_pes(self) -> list[int | str] | None:
        """Each entry's PE index, or its control kind ("barrier", "nop", "end"), read from
        the CMDQ entries without building them; when the CMDQ itself streams, what the
        EntryStream knows in advance (`EntryStream.entry_pes`: None, or a PE of each
        entry's chip)."""
        cmdq = self._lower.entries
        if isinstance(cmdq, EntryStream):
            return cmdq.entry_pes()
        pe_index = self._lower.limits.pe_index
        return [e.control if e.control is not None else pe_index(e.pe) for e in cmdq]

    def retire(self, e: ProgramEntry) -> None:
        """Entry `e` has completed: report it and forget it."""
        self._on_retire(e)
        self._built.pop(e.id, None)
        if e.command is not None:
            e.command.meta.pop("entry", None)  # the command ↔ entry cycle, for refcounting
