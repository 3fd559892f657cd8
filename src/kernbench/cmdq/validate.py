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
* operand pairs (``bias_bank``/``bias_offset``, ...) come together;
* each opcode's own rules (its class's ``rules`` / ``check_hbm``: conv kernels fit their
  padded input; RoPE ``head_dim`` is even and divides ``length``; ``in2_rows`` is 1 or
  ``rows``; a DMA ``stride_bytes`` comes with ``rows`` > 1; layer-op streams fit the HBM);
* every pe_math op the simulator will price an entry by (a VE opcode's cost op, a
  VE_LAYER_OP's ``op``) is in the topology's cost table: validate checks everything
  simulate relies on;
* exactly one END, and it is the last entry.

When some entries do not parse, the others are still checked, so one run lists every
problem. `field_warnings` names unknown fields (kept, spec §14) that look like a misspelt
known field.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable
from types import UnionType
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin

from kernbench.cmdq.io import (
    MAX_CMDQ_BYTES,
    decode_json,
    parse_bytes_fast,
    parse_partial,
    read_bytes,
)
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.opcodes.registry import qbits_fields
from kernbench.cmdq.schema import QBITS_ALLOWED, CmdqProgram, EntryBase
from kernbench.errors import InputError

_QBITS_SET = frozenset(QBITS_ALLOWED)
_QBITS_TEXT = ", ".join(str(q) for q in QBITS_ALLOWED)



def validate_program(
    program: CmdqProgram,
    limits: CmdqLimits,
    file: str | None = None,
    *,
    max_errors: int | None = None,
) -> list[InputError]:
    """Every problem of ``program`` on hardware ``limits``, in entry order (program-level
    problems such as a missing END come last). Empty list: the program is valid."""
    return _Checker(list(program.cmdq), limits, file, max_errors).run()


def check_program(program: CmdqProgram, limits: CmdqLimits, file: str | None = None) -> None:
    """Raise the first problem `validate_program` finds, if any."""
    errors = validate_program(program, limits, file, max_errors=1)
    if errors:
        raise errors[0]


def validate_document(
    obj: object, limits: CmdqLimits, file: str | None = None, *, max_errors: int | None = None
) -> list[InputError]:
    """Parse problems of a decoded JSON object, then the program problems of every entry
    that parsed (all of `validate_program`'s when the whole program parsed)."""
    return _validate_obj(obj, limits, file, max_errors)[0]


def validate_file(
    path: str | os.PathLike[str],
    limits: CmdqLimits,
    *,
    max_errors: int | None = None,
    max_bytes: int = MAX_CMDQ_BYTES,
) -> list[InputError]:
    """Every problem of a CMDQ file: unreadable or malformed file, parse problems, then
    program problems."""
    return validate_file_report(path, limits, max_errors=max_errors, max_bytes=max_bytes)[0]


def validate_file_report(
    path: str | os.PathLike[str],
    limits: CmdqLimits,
    *,
    max_errors: int | None = None,
    max_bytes: int = MAX_CMDQ_BYTES,
) -> tuple[list[InputError], list[str]]:
    """(`validate_file`'s problems, `field_warnings` lines) of a CMDQ file."""
    file = str(path)
    try:
        data = read_bytes(path, max_bytes=max_bytes)
        program = parse_bytes_fast(data, file=file)
        if program is not None:
            return (validate_program(program, limits, file, max_errors=max_errors),
                    field_warnings(program.cmdq, file))
        obj = decode_json(data, file=file)
    except InputError as exc:
        return [exc], []
    return _validate_obj(obj, limits, file, max_errors)


def _validate_obj(obj: object, limits: CmdqLimits, file: str | None,
                  max_errors: int | None) -> tuple[list[InputError], list[str]]:
    parsed = parse_partial(obj, file=file, max_errors=max_errors)
    warnings = field_warnings(parsed.entries, file)
    if parsed.program is not None:
        return validate_program(parsed.program, limits, file, max_errors=max_errors), warnings
    errors = list(parsed.errors)
    left = None if max_errors is None else max_errors - len(errors)
    if parsed.entries and (left is None or left > 0):
        entries, skip = _stand_ins(parsed.entries, parsed.raw)
        errors += _Checker(entries, limits, file, left, skip=skip, complete=False).run()
    return errors, warnings


class _Positions:
    """`index_of` of a program whose ids are checked to be their positions 0..n-1."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get(self, ident: object, default: object = None) -> Any:
        return ident if isinstance(ident, int) and 0 <= ident < self.n else default


class EntryChecker:
    """`check_program`'s checks for a program of `n` entries that arrive one at a time, in
    order (a program compiled while it runs: `cmdq.stream`): `check(i, entry)` raises the
    entry's first problem. Since ids must equal positions, an id names the entry at that
    position, seen or not; END must be entry n-1. `deps_after` (which would need the
    later entries) is refused: the compiler emits none."""

    def __init__(self, n: int, limits: CmdqLimits, file: str | None = None) -> None:
        self._c = _Checker([], limits, file, 1)
        self._c.n = n
        self._c.index_of = _Positions(n)
        self.n = n

    def check(self, i: int, e: EntryBase) -> None:
        c = self._c
        with contextlib.suppress(_Full):
            where = f"entry {e.id}"
            if e.id != i:  # the stream knows no other positions: say which id belongs here
                c.add(where, "id", f"id {e.id} is out of order: the entry at index {i} must "
                      f"have id {i} (ids must be 0..n-1 in order)")
            c._entry(i, e)
            if e.deps_after:
                c.add(where, "deps_after", "a program checked as it streams has no deps_after")
            if e.opcode == "END" and i != self.n - 1:
                c.add(where, "opcode", f"END must be the last entry, but this is index {i} "
                      f"of {self.n}")
            if i == self.n - 1 and e.opcode != "END":
                c.add(where, "opcode", f"the last entry must be END, got {e.opcode}")
        if c.errors:
            raise c.errors[0]


def _stand_ins(entries: list[EntryBase | None],
               raw: list[Any]) -> tuple[list[EntryBase], set[int]]:
    """The parsed entries, with an unchecked stand-in (its raw id and opcode, no deps) for
    each entry that did not parse, so ids and dependencies still resolve."""
    out: list[EntryBase] = []
    skip: set[int] = set()
    for i, e in enumerate(entries):
        if e is not None:
            out.append(e)
            continue
        r = raw[i] if isinstance(raw[i], dict) else {}
        ident = r.get("id")
        ok_id = isinstance(ident, int) and not isinstance(ident, bool) and ident >= 0
        opcode = r.get("opcode")
        out.append(EntryBase.model_construct(
            opcode=opcode if isinstance(opcode, str) else "", id=ident if ok_id else i))
        skip.add(i)
    return out, skip


# ------------------------------------------------------------------ misspelt fields


def field_warnings(entries: Iterable[EntryBase | None], file: str | None = None) -> list[str]:
    """One line per unknown field (kept, spec §14) within edit distance 2 of a field its
    opcode knows: ``file: entry 3: field 'lenght': unknown field kept (spec §14); did you
    mean 'length'?``. Fields of two letters or fewer are never suggested."""
    out = []
    for e in entries:
        if e is None or not e.model_extra:
            continue
        known = [f for f in type(e).model_fields if len(f) > 2]
        for name in e.model_extra:
            near = min(known, key=lambda f: (edit_distance(name, f), f), default=None)
            if near is not None and edit_distance(name, near) <= 2:
                out.append(InputError(
                    f"unknown field kept (spec §14); did you mean '{near}'?",
                    file=file, where=f"entry {e.id}", field=name).line())
    return out


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) between two strings."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


class _Plan(NamedTuple):
    """Which fields of one entry model need which cheap checks."""

    qbits: tuple[str, ...]
    ints: tuple[str, ...]  # must be >= 0
    lists: tuple[str, ...]  # lists of ids, items >= 0
    pairs: tuple[tuple[str, str], ...]  # (bank, offset) given together or not at all


def _kinds(annotation: object) -> set[str]:
    if annotation is int:
        return {"int"}
    origin = get_origin(annotation)
    if origin is list:  # a list of ints (not of a fused entry's steps)
        return {"list"} if _kinds(get_args(annotation)[0]) == {"int"} else set()
    if origin is Annotated:
        return _kinds(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return set().union(*(_kinds(a) for a in get_args(annotation)))
    return set()


@functools.cache
def _plan(model: type[EntryBase]) -> _Plan:
    fields = model.model_fields
    qbits = qbits_fields(model)
    ints, lists = [], []
    for name, info in fields.items():
        if name in qbits or name in model.signed_fields or name == "pe":
            continue
        kinds = _kinds(info.annotation)
        if "int" in kinds:
            ints.append(name)
        elif "list" in kinds:
            lists.append(name)
    # an optional operand is a (bank, offset) pair that must come together
    pairs = tuple((b, f"{b[:-5]}_offset") for b, info in fields.items()
                  if b.endswith("_bank") and info.default is None
                  and f"{b[:-5]}_offset" in fields)
    return _Plan(qbits, tuple(ints), tuple(lists), pairs)


class _Full(Exception):
    """Raised internally when max_errors problems have been collected."""


class _Sink:
    """One entry's view of the checker, as an opcode's rules see it (`Rules`)."""

    def __init__(self, checker: _Checker, where: str) -> None:
        self.limits = checker.limits
        self._checker = checker
        self._where = where

    def add(self, field: str | None, reason: str) -> None:
        self._checker.add(self._where, field, reason)


class _Checker:
    def __init__(self, entries: list[EntryBase], limits: CmdqLimits, file: str | None,
                 max_errors: int | None, *, skip: set[int] | None = None,
                 complete: bool = True) -> None:
        self.entries = entries
        self.limits = limits
        self.file = file
        self.max_errors = max_errors
        self.skip = skip or set()  # stand-ins of entries that did not parse
        self.complete = complete  # every entry parsed: program-level checks apply
        self.errors: list[InputError] = []
        # id -> index of its first occurrence
        self.index_of: Any = {}
        self.id_reported = False
        self.n: int | None = None  # the program's length, when entries come one at a time

    def add(self, where: str | None, field: str | None, reason: str) -> None:
        self.errors.append(InputError(reason, file=self.file, where=where, field=field))
        if self.max_errors is not None and len(self.errors) >= self.max_errors:
            raise _Full

    def run(self) -> list[InputError]:
        with contextlib.suppress(_Full):
            self._run()
        return self.errors

    def _run(self) -> None:
        entries = self.entries
        for i, e in enumerate(entries):
            ident = e.id
            if isinstance(ident, int) and ident not in self.index_of:
                self.index_of[ident] = i
        for i, e in enumerate(entries):
            if i not in self.skip:
                self._entry(i, e)
        self._end(entries)

    # ----------------------------------------------------------------- per entry

    def _entry(self, i: int, e: EntryBase) -> None:
        where = f"entry {e.id}"
        self._ident(i, e, where)
        self._signs_and_bits(e, where)
        self._deps(i, e, where)
        pe = self._pe(e, where)
        self._pairs(e, where)
        sink = _Sink(self, where)
        shape_ok = e.rules(sink)
        self._costs(e, where)
        if shape_ok:
            self._tcm(e, where, pe)
            e.check_hbm(sink)

    def _ident(self, i: int, e: EntryBase, where: str) -> None:
        ident = e.id
        if ident == i or self.id_reported or self.skip:
            # once ids are off, every later id is off too: report the first only; with
            # entries that did not parse, their parse errors come first
            return
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
        if "wait_for" in type(e).model_fields:
            lists.append(("wait_for", e.wait_for, True))
        lists.append(("deps_after", e.deps_after, False))
        n = self.n if self.n is not None else len(self.entries)
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

    def _pairs(self, e: EntryBase, where: str) -> None:
        values = e.__dict__
        for bank, offset in _plan(type(e)).pairs:
            b, o = values.get(bank), values.get(offset)
            if (b is None) != (o is None):
                missing = offset if o is None else bank
                self.add(where, missing, f"{bank} and {offset} must be given together")

    def _costs(self, e: EntryBase, where: str) -> None:
        known = self.limits.math_ops
        for field, op in e.cost_ops().items():
            if op not in known:
                what = f"{e.opcode} is priced by" if field == "opcode" else "names"
                self.add(where, field, f"{what} pe_math op '{op}', which has no cost on this "
                         f"topology (op_cycles has: {', '.join(sorted(known))})")

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

    # ----------------------------------------------------------------- program level

    def _end(self, entries: list[EntryBase]) -> None:
        n = len(entries)
        ends = [i for i, e in enumerate(entries) if e.opcode == "END"]
        for i in ends:
            if i != n - 1:
                self.add(f"entry {entries[i].id}", "opcode",
                         f"END must be the last entry, but this is index {i} of {n}")
        if not self.complete and (not ends or n - 1 in self.skip):
            return  # the entries that did not parse may hold the END
        if not ends:
            if n:
                self.add(f"entry {entries[-1].id}", "opcode",
                         f"the last entry must be END, got {entries[-1].opcode}")
            else:
                self.add(None, "cmdq", "the program is empty: it needs at least an END entry")
