"""Whole-program checks of a CMDQ program against a topology's `CmdqLimits`.

`validate_program` returns every problem as an `InputError` (one line: file, ``entry <id>``,
field, reason); `check_program` raises the first. `validate_document` / `validate_file`
also report the parse problems of a raw JSON object or file, so one call lists everything
wrong with a file (what ``kernbench validate`` prints).

Checked here (the models in `schema` check single-entry types, signs and bit widths):

* ids are 0..n-1 in order (no duplicates, no gaps);
* ``deps_before`` and BARRIER ``wait_for`` name existing, earlier entries (a dependency
  on itself or on a later entry could deadlock the in-order Control FSM);
  ``deps_after`` names existing, later entries;
* ``pe`` names a PE of the topology; ``te_id`` < te_per_pe; ``ve_id`` < ve_per_pe;
* bit widths in {2, 4, 8, 16, 32} and no negative integers (again, for models built
  without validation);
* every TCM operand (`schema.entry_tcm_ranges`) lies inside an existing bank;
* every DMA's HBM range (`schema.entry_dram_range`) lies inside the HBM; a strided DMA
  splits into whole rows of whole bytes that do not overlap;
* operand pairs (``bias_bank``/``bias_offset``, ...) come together; conv kernels fit
  their padded input; RoPE ``head_dim`` is even and divides ``length``; ``in2_rows`` is 1
  or ``rows``;
* exactly one END, and it is the last entry.
"""

from __future__ import annotations

import contextlib
import functools
import os
from types import UnionType
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin

from kernbench.cmdq.io import (
    MAX_CMDQ_BYTES,
    decode_json,
    parse_bytes_fast,
    parse_program_collect,
    read_bytes,
)
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import (
    QBITS_ALLOWED,
    QBITS_FIELDS,
    SIGNED_INT_FIELDS,
    Barrier,
    CmdqProgram,
    DmaTile,
    End,
    EntryBase,
    LayerOp,
    TeConvTile,
    TeTile,
    VeAddTile,
    VeMulTile,
    VeRopeTile,
    VeTile,
)
from kernbench.errors import InputError

_QBITS_SET = frozenset(QBITS_ALLOWED)
_QBITS_TEXT = ", ".join(str(q) for q in QBITS_ALLOWED)
_PAIRS = (
    ("bias_bank", "bias_offset"),
    ("gamma_bank", "gamma_offset"),
    ("beta_bank", "beta_offset"),
    ("cos_bank", "cos_offset"),
    ("sin_bank", "sin_offset"),
)


def validate_program(
    program: CmdqProgram,
    limits: CmdqLimits,
    file: str | None = None,
    *,
    max_errors: int | None = None,
) -> list[InputError]:
    """Every problem of ``program`` on hardware ``limits``, in entry order (program-level
    problems such as a missing END come last). Empty list: the program is valid."""
    return _Checker(program, limits, file, max_errors).run()


def check_program(program: CmdqProgram, limits: CmdqLimits, file: str | None = None) -> None:
    """Raise the first problem `validate_program` finds, if any."""
    errors = validate_program(program, limits, file, max_errors=1)
    if errors:
        raise errors[0]


def validate_document(
    obj: Any, limits: CmdqLimits, file: str | None = None, *, max_errors: int | None = None
) -> list[InputError]:
    """Parse problems of a decoded JSON object, or, if it parses, `validate_program`'s."""
    program, errors = parse_program_collect(obj, file=file, max_errors=max_errors)
    if program is None:
        return errors
    return validate_program(program, limits, file, max_errors=max_errors)


def validate_file(
    path: str | os.PathLike[str],
    limits: CmdqLimits,
    *,
    max_errors: int | None = None,
    max_bytes: int = MAX_CMDQ_BYTES,
) -> list[InputError]:
    """Every problem of a CMDQ file: unreadable or malformed file, parse problems, then
    program problems."""
    file = str(path)
    try:
        data = read_bytes(path, max_bytes=max_bytes)
        program = parse_bytes_fast(data, file=file)
        if program is not None:
            return validate_program(program, limits, file, max_errors=max_errors)
        obj = decode_json(data, file=file)
    except InputError as exc:
        return [exc]
    return validate_document(obj, limits, file, max_errors=max_errors)


class _Plan(NamedTuple):
    """Which fields of one entry model need which cheap checks."""

    qbits: tuple[str, ...]
    ints: tuple[str, ...]  # must be >= 0
    lists: tuple[str, ...]  # lists of ids, items >= 0
    pairs: tuple[tuple[str, str], ...]  # (bank, offset) given together or not at all


def _kinds(annotation: Any) -> set[str]:
    if annotation is int:
        return {"int"}
    origin = get_origin(annotation)
    if origin is list:
        return {"list"}
    if origin is Annotated:
        return _kinds(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return set().union(*(_kinds(a) for a in get_args(annotation)))
    return set()


@functools.cache
def _plan(model: type[EntryBase]) -> _Plan:
    fields = model.model_fields
    qbits = tuple(f for f in fields if f in QBITS_FIELDS)
    ints, lists = [], []
    for name, info in fields.items():
        if name in qbits or name in SIGNED_INT_FIELDS or name == "pe":
            continue
        kinds = _kinds(info.annotation)
        if "int" in kinds:
            ints.append(name)
        elif "list" in kinds:
            lists.append(name)
    pairs = tuple((b, o) for b, o in _PAIRS if b in fields and o in fields)
    return _Plan(qbits, tuple(ints), tuple(lists), pairs)


class _Full(Exception):
    """Raised internally when max_errors problems have been collected."""


class _Checker:
    def __init__(
        self, program: CmdqProgram, limits: CmdqLimits, file: str | None, max_errors: int | None
    ) -> None:
        self.program = program
        self.limits = limits
        self.file = file
        self.max_errors = max_errors
        self.errors: list[InputError] = []
        # id -> index of its first occurrence
        self.index_of: dict[int, int] = {}
        self.id_reported = False

    def add(self, where: str | None, field: str | None, reason: str) -> None:
        self.errors.append(InputError(reason, file=self.file, where=where, field=field))
        if self.max_errors is not None and len(self.errors) >= self.max_errors:
            raise _Full

    def run(self) -> list[InputError]:
        with contextlib.suppress(_Full):
            self._run()
        return self.errors

    def _run(self) -> None:
        entries = self.program.cmdq
        for i, e in enumerate(entries):
            ident = e.id
            if isinstance(ident, int) and ident not in self.index_of:
                self.index_of[ident] = i
        for i, e in enumerate(entries):
            self._entry(i, e)
        self._end(entries)

    # ----------------------------------------------------------------- per entry

    def _entry(self, i: int, e: EntryBase) -> None:
        where = f"entry {e.id}"
        self._ident(i, e, where)
        self._signs_and_bits(e, where)
        self._deps(i, e, where)
        pe = self._pe(e, where)
        if isinstance(e, TeTile) and e.te_id >= self.limits.te_per_pe:
            self.add(where, "te_id", self._engine_range("te_id", e.te_id, self.limits.te_per_pe))
        if isinstance(e, VeTile) and e.ve_id >= self.limits.ve_per_pe:
            self.add(where, "ve_id", self._engine_range("ve_id", e.ve_id, self.limits.ve_per_pe))
        shape_ok = self._shape(e, where)
        if shape_ok:
            self._tcm(e, where, pe)
        if isinstance(e, DmaTile) and shape_ok:
            self._dram(e, where)
        if isinstance(e, LayerOp):
            self._layer_op(e, where)

    def _ident(self, i: int, e: EntryBase, where: str) -> None:
        ident = e.id
        if ident == i or self.id_reported:
            return  # once ids are off, every later id is off too: report the first only
        self.id_reported = True
        first = self.index_of.get(ident)
        if first is not None and first != i:
            self.add(where, "id", f"duplicate id {ident} (also at index {first}); ids must be "
                     f"0..n-1 in order, this entry is at index {i}")
        else:
            self.add(where, "id", f"id {ident} is out of order: the entry at index {i} must "
                     f"have id {i} (ids must be 0..n-1 in order)")

    def _signs_and_bits(self, e: EntryBase, where: str) -> None:
        # The models enforce these on parse; this catches models built with
        # model_construct() or mutated afterwards.
        plan = _plan(type(e))
        values = e.__dict__
        for name in plan.qbits:
            value = values.get(name)
            if value is not None and value not in _QBITS_SET:
                self.add(where, name, f"must be one of {_QBITS_TEXT}, got {value!r}")
        for name in plan.ints:
            value = values.get(name)
            if isinstance(value, int) and value < 0:
                self.add(where, name, f"must be >= 0, got {value}")
        for name in plan.lists:
            value = values.get(name)
            if value and min(value) < 0:
                k, item = next((k, v) for k, v in enumerate(value) if v < 0)
                self.add(where, name, f"at [{k}]: must be >= 0, got {item}")

    def _deps(self, i: int, e: EntryBase, where: str) -> None:
        lists: list[tuple[str, list[int], bool]] = [("deps_before", e.deps_before, True)]
        if isinstance(e, Barrier):
            lists.append(("wait_for", e.wait_for, True))
        lists.append(("deps_after", e.deps_after, False))
        n = len(self.program.cmdq)
        for field, ids, earlier in lists:
            for d in ids:
                j = self.index_of.get(d)
                if j is None:
                    span = f" (ids are 0..{n - 1})" if d >= n else ""
                    self.add(where, field, f"names entry {d}, which does not exist{span}")
                elif j == i:
                    self.add(where, field, f"names entry {d}, this entry itself "
                             "(a dependency on itself never resolves)")
                elif earlier and j > i:
                    self.add(where, field, f"names entry {d}, which comes later: entries may "
                             "only wait for earlier entries (this could be a cycle)")
                elif not earlier and j < i:
                    self.add(where, field, f"names entry {d}, which comes earlier: deps_after "
                             "must name later entries (this could be a cycle)")

    def _pe(self, e: EntryBase, where: str) -> int | None:
        try:
            return self.limits.pe_index(e.pe)
        except ValueError as exc:
            self.add(where, "pe", str(exc))
            return None

    @staticmethod
    def _engine_range(field: str, value: int, count: int) -> str:
        return (f"{field} {value} is out of range: each PE has {count} "
                f"{'tensor' if field == 'te_id' else 'vector'} engine"
                f"{'s' if count != 1 else ''} (0..{count - 1})")

    def _shape(self, e: EntryBase, where: str) -> bool:
        """Op-specific consistency; False when sizes are too broken to compute ranges."""
        ok = True
        values = e.__dict__
        for bank, offset in _plan(type(e)).pairs:
            b, o = values.get(bank), values.get(offset)
            if (b is None) != (o is None):
                missing = offset if o is None else bank
                self.add(where, missing, f"{bank} and {offset} must be given together")
        if isinstance(e, TeConvTile):
            h_out, w_out = e.out_hw
            if h_out < 1:
                self.add(where, "kh", f"kernel height {e.kh} does not fit the input height "
                         f"{e.h} with padding {e.padding}")
                ok = False
            if w_out < 1:
                self.add(where, "kw", f"kernel width {e.kw} does not fit the input width "
                         f"{e.w} with padding {e.padding}")
                ok = False
        elif isinstance(e, VeRopeTile):
            hd = e.head_dim_or_length
            if hd % 2:
                self.add(where, "head_dim" if e.head_dim is not None else "length",
                         f"RoPE head_dim must be even, got {hd}")
                ok = False
            elif e.length % hd:
                self.add(where, "head_dim", f"head_dim {hd} does not divide length {e.length}")
                ok = False
        elif isinstance(e, VeAddTile | VeMulTile):
            if e.in2_rows is not None and e.in2_rows not in (1, e.rows):
                self.add(where, "in2_rows", f"must be 1 (broadcast) or rows ({e.rows}), "
                         f"got {e.in2_rows}")
                ok = False
        elif isinstance(e, DmaTile) and e.strided:
            if e.num_elements % e.rows:
                self.add(where, "rows", f"num_elements {e.num_elements} does not split into "
                         f"{e.rows} equal rows")
                ok = False
            elif (e.num_elements // e.rows * e.qbits) % 8:
                per_row = e.num_elements // e.rows
                self.add(where, "rows", f"a row of {per_row} element{'s' if per_row > 1 else ''}"
                         f" at {e.qbits} bits is not a whole number of bytes")
                ok = False
        return ok

    def _tcm(self, e: EntryBase, where: str, pe: int | None) -> None:
        banks = self.limits.tcm_banks
        bank_bytes = self.limits.tcm_bank_bytes
        for r in e.tcm_ranges(pe if pe is not None else 0):
            if r.bank < 0 or r.offset < 0:
                continue  # reported as negative numbers
            if r.bank >= banks:
                self.add(where, r.bank_field, f"bank {r.bank} is beyond the TCM, which has "
                         f"{banks} banks (0..{banks - 1})")
            elif r.end > bank_bytes:
                self.add(where, r.offset_field, f"{r.role} range of {r.nbytes} bytes "
                         f"({r.elements} elements at {r.qbits} bits) at offset {r.offset} "
                         f"ends at byte {r.end}, beyond the {bank_bytes}-byte bank {r.bank}")

    def _dram(self, e: DmaTile, where: str) -> None:
        r = e.dram_range()
        if e.strided and r.stride_bytes < r.row_bytes:
            self.add(where, "stride_bytes", f"stride of {r.stride_bytes} bytes is shorter than "
                     f"a row ({r.row_bytes} bytes): rows would overlap")
            return
        if r.end > self.limits.hbm_bytes:
            shape = (f"{r.rows} rows of {r.row_bytes} bytes every {r.stride_bytes} bytes"
                     if r.rows > 1 else f"{r.nbytes} bytes")
            self.add(where, "dram_addr", f"HBM range of {shape} at address {r.addr} ends at "
                     f"{r.end}, beyond the {self.limits.hbm_bytes}-byte HBM")

    def _layer_op(self, e: LayerOp, where: str) -> None:
        for field in ("in_bytes", "out_bytes"):
            n = getattr(e, field)
            if e.dram_addr + n > self.limits.hbm_bytes:
                self.add(where, field, f"{n} bytes from address {e.dram_addr} run past the "
                         f"{self.limits.hbm_bytes}-byte HBM")

    # ----------------------------------------------------------------- program level

    def _end(self, entries: list[EntryBase]) -> None:
        n = len(entries)
        ends = [i for i, e in enumerate(entries) if isinstance(e, End)]
        for i in ends:
            if i != n - 1:
                self.add(f"entry {entries[i].id}", "opcode",
                         f"END must be the last entry, but this is index {i} of {n}")
        if not ends:
            if n:
                self.add(f"entry {entries[-1].id}", "opcode",
                         f"the last entry must be END, got {entries[-1].opcode}")
            else:
                self.add(None, "cmdq", "the program is empty: it needs at least an END entry")
