"""Reading and writing CMDQ JSON files.

* `load_program(path)` reads a file (size-capped), `parse_program(obj)` a decoded JSON
  object; both return a `CmdqProgram` or raise `InputError` with one line naming the file,
  the entry, the field and the reason.
* `parse_program_collect(obj)` returns every entry-level problem instead of the first;
  `parse_partial(obj)` also keeps the entries that did parse (the validator's
  `validate_document` checks those too).
* `parse_entries(entries, metadata)` builds the program from entries already decoded (a
  compiler's document in memory: no JSON text written or read), consuming the list.
* `dump_program(program, path)` / `dumps_program(program)` write deterministic JSON: one
  entry per line, fields in a fixed order, unset optional fields left out.

Speed: the happy path validates the whole program in one pydantic-core call (the tagged
union dispatches on ``opcode`` in Rust); only when that fails does the parser walk the
entries one by one, with a dict lookup on ``opcode`` in the opcode registry, to say
exactly what is wrong where.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from kernbench.cmdq.opcodes.registry import qbits_fields
from kernbench.cmdq.schema import (
    CMDQ_VERSION,
    MODEL_BY_OPCODE,
    QBITS_ALLOWED,
    CmdqMetadata,
    CmdqProgram,
    EntryBase,
    supported_version,
)
from kernbench.errors import InputError

MAX_CMDQ_BYTES = 256 * 1024 * 1024
"""Largest CMDQ file `load_program` reads (256 MiB)."""

OLDEST_VERSION = "1.0"
"""The version a file means when it says none (the spec's own example has no metadata)."""


# --------------------------------------------------------------------------- reading


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = MAX_CMDQ_BYTES) -> bytes:
    """The file's bytes, or InputError if it is missing, not a file, or over ``max_bytes``."""
    file = str(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise InputError(
                    f"file is {size} bytes, over the {max_bytes}-byte limit for CMDQ programs",
                    file=file,
                )
            data = fh.read(max_bytes + 1)
    except IsADirectoryError:
        raise InputError("is a directory, not a CMDQ JSON file", file=file) from None
    except FileNotFoundError:
        raise InputError("no such file", file=file) from None
    except PermissionError:
        raise InputError("permission denied", file=file) from None
    if len(data) > max_bytes:
        raise InputError(f"file is over the {max_bytes}-byte limit for CMDQ programs", file=file)
    return data


def unfused(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON entries with each VE_FUSED_TILE replaced by its steps, in order, each step
    carrying the entry's ``id``, ``pe`` and ``layer_id``: what a count of opcodes, or a
    search for one, sees inside fused chains."""
    out: list[dict[str, Any]] = []
    for e in entries:
        if e.get("opcode") == "VE_FUSED_TILE" and isinstance(e.get("steps"), list):
            own = {k: e[k] for k in ("id", "pe", "layer_id") if k in e}
            out += [{**s, **own} for s in e["steps"]]
        else:
            out.append(e)
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_json(data: bytes | str, *, file: str | None = None) -> Any:
    """json.loads, with a one-line InputError for malformed JSON (NaN/Infinity rejected)."""
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", file=file
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"malformed JSON: not UTF-8 text ({exc.reason})", file=file) from None
    except ValueError as exc:  # NaN / Infinity, from _reject_constant
        raise InputError(f"malformed JSON: {exc}", file=file) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", file=file) from None


def load_program(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_CMDQ_BYTES
) -> CmdqProgram:
    """Read and parse a CMDQ JSON file. Raises InputError (one line) on any problem."""
    file = str(path)
    data = read_bytes(path, max_bytes=max_bytes)
    program = parse_bytes_fast(data, file=file)
    if program is not None:
        return program
    # Slow path, for a precise message: decode, then walk the entries.
    return parse_program(decode_json(data, file=file), file=file)


def parse_bytes_fast(data: bytes, *, file: str | None = None) -> CmdqProgram | None:
    """The program in ``data`` if it is well-formed, else None (no message: call
    `decode_json` and `parse_program` / `parse_program_collect` to learn what is wrong).
    An unsupported metadata.version raises InputError."""
    if b"NaN" in data or b"Infinity" in data:
        # pydantic's JSON parser accepts these constants; json.loads rejects them (they
        # are not JSON). Leave such files to the slow path so both readers agree.
        return None
    try:
        program = CmdqProgram.model_validate_json(data)
    except ValidationError:
        return None
    _check_metadata(program, file)
    return program


PARSE_CHUNK = 4096
"""Entries `parse_entries` validates per pydantic call (the dicts of one chunk and the models
of the program are what coexist)."""


def parse_entries(entries: list[Any], metadata: Mapping[str, Any], *,
                  file: str | None = None) -> CmdqProgram:
    """The program whose entries are the decoded objects in ``entries`` and whose metadata
    is ``metadata``, validated as `load_program` would validate the same document read
    from a file (the same models, strict), without writing or reading JSON text.

    ``entries`` is consumed: each chunk of `PARSE_CHUNK` objects is removed from the list
    once its models exist, so a caller that gives the list up never holds the objects and
    the models of a whole real-size program at once. Raises InputError (one line, naming
    the entry) on the first problem, like `parse_program`."""
    try:
        program = CmdqProgram.model_validate({"cmdq": [], "metadata": dict(metadata)})
    except ValidationError:
        return parse_program({"cmdq": entries, "metadata": metadata}, file=file)  # the message
    _check_metadata(program, file)
    models: list[EntryBase] = []
    done = 0
    while entries:
        chunk = entries[:PARSE_CHUNK]
        models.extend(parse_chunk(chunk, done, file=file))
        done += len(chunk)
        del entries[:PARSE_CHUNK]
    program.cmdq = models
    return program


def parse_chunk(chunk: list[Any], first: int, *, file: str | None = None) -> list[EntryBase]:
    """The models of decoded entries that stand at index `first` onward of a program (one
    pydantic call); the first problem is an InputError naming its index in the program."""
    try:
        return CmdqProgram.model_validate({"cmdq": chunk, "metadata": {}}).cmdq
    except ValidationError:
        _, errors = parse_program_collect({"cmdq": chunk}, file=file, max_errors=1)
        error = errors[0] if errors else InputError("invalid entry", file=file)
        if error.where and error.where.startswith("entry at index "):
            index = int(error.where.rsplit(" ", 1)[1]) + first
            error = InputError(error.reason, file=file, where=f"entry at index {index}",
                               field=error.field)
        raise error from None


def parse_program(obj: object, *, file: str | None = None) -> CmdqProgram:
    """Build a `CmdqProgram` from a decoded JSON object; raise the first problem found."""
    program, errors = parse_program_collect(obj, file=file, max_errors=1)
    if errors:
        raise errors[0]
    assert program is not None
    return program


def parse_program_collect(
    obj: object, *, file: str | None = None, max_errors: int | None = None
) -> tuple[CmdqProgram | None, list[InputError]]:
    """Parse entry by entry, collecting problems (up to ``max_errors``).

    Returns ``(program, [])`` on success, else ``(None, errors)``. Each error names the
    entry (``entry <id>``, or ``entry at index <i>`` when the id itself is unusable), the
    field and the reason.
    """
    result = parse_partial(obj, file=file, max_errors=max_errors)
    return result.program, result.errors


class ParseResult(NamedTuple):
    """What the parser made of a decoded JSON object: the program when there is no problem;
    else each raw entry's model (None where it did not parse, `raw` holds the JSON), and
    the problems."""

    program: CmdqProgram | None
    entries: list[EntryBase | None]
    raw: list[Any]
    errors: list[InputError]


def parse_partial(
    obj: object, *, file: str | None = None, max_errors: int | None = None
) -> ParseResult:
    """`parse_program_collect`, keeping the entries that did parse (the validator checks
    them too, so one run lists every problem)."""
    if not isinstance(obj, Mapping):
        return ParseResult(None, [], [], [InputError(
            f"top level must be a JSON object with a 'cmdq' list, got {_json_type(obj)}",
            file=file,
        )])
    # Fast path: one pydantic-core call for the whole program.
    try:
        program = CmdqProgram.model_validate(obj)
    except ValidationError:
        pass
    else:
        try:
            _check_metadata(program, file)
        except InputError as exc:
            return ParseResult(None, list(program.cmdq), list(program.cmdq), [exc])
        return ParseResult(program, list(program.cmdq), list(program.cmdq), [])
    # Slow path: entry by entry, with a dict lookup on opcode, to locate every problem.
    raw_entries = obj.get("cmdq")
    if raw_entries is None:
        return ParseResult(None, [], [], [InputError("required field is missing", file=file,
                                                     field="cmdq")])
    if not isinstance(raw_entries, list):
        return ParseResult(None, [], [], [InputError(
            f"must be a list of entries, got {_json_type(raw_entries)}", file=file, field="cmdq"
        )])
    errors: list[InputError] = []
    metadata = _parse_metadata(obj.get("metadata"), file, errors)
    entries: list[EntryBase | None] = []
    for index, raw in enumerate(raw_entries):
        if max_errors is not None and len(errors) >= max_errors:
            break
        entries.append(_parse_entry(raw, index, file, errors))
    extra = {k: v for k, v in obj.items() if k not in ("cmdq", "metadata")}
    if errors or metadata is None:
        if max_errors is not None:
            del errors[max_errors:]
        return ParseResult(None, entries, raw_entries, errors)
    program = CmdqProgram.model_construct(cmdq=entries, metadata=metadata, **extra)
    return ParseResult(program, list(program.cmdq), raw_entries, [])


def _parse_metadata(raw_meta: object, file: str | None,
                    errors: list[InputError]) -> CmdqMetadata | None:
    """The metadata (version 1.0 when it gives none); None, with errors added, if broken."""
    if raw_meta is None:
        return CmdqMetadata(version=OLDEST_VERSION)
    if not isinstance(raw_meta, Mapping):
        errors.append(InputError(
            f"must be an object, got {_json_type(raw_meta)}", file=file, where="metadata"
        ))
        return None
    try:
        metadata = CmdqMetadata.model_validate(raw_meta)
    except ValidationError as exc:
        errors.extend(_convert(exc, file=file, where="metadata"))
        return None
    if "version" not in raw_meta:
        return metadata.model_copy(update={"version": OLDEST_VERSION})
    if not supported_version(metadata.version):
        errors.append(_version_error(metadata.version, file))
    return metadata


def _parse_entry(raw: object, index: int, file: str | None,
                 errors: list[InputError]) -> EntryBase | None:
    """One entry's model, or None with its problems added to ``errors``."""
    where = _where(raw, index)
    if not isinstance(raw, Mapping):
        errors.append(InputError(f"must be an object, got {_json_type(raw)}", file=file,
                                 where=where))
        return None
    opcode = raw.get("opcode")
    if opcode is None:
        errors.append(InputError("required field is missing", file=file, where=where,
                                 field="opcode"))
        return None
    model = MODEL_BY_OPCODE.get(opcode) if isinstance(opcode, str) else None
    if model is None:
        errors.append(InputError(_unknown_opcode(opcode), file=file, where=where,
                                 field="opcode"))
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors.extend(_convert(exc, file=file, where=where, qbits=qbits_fields(model)))
        return None


def _check_metadata(program: CmdqProgram, file: str | None) -> None:
    """Fill in the implied version of a file that gives none; reject versions we can't read."""
    if "metadata" not in program.model_fields_set:
        program.metadata = CmdqMetadata(version=OLDEST_VERSION)
    elif "version" not in program.metadata.model_fields_set:
        program.metadata.version = OLDEST_VERSION
    if not supported_version(program.metadata.version):
        raise _version_error(program.metadata.version, file)


def _version_error(version: str, file: str | None) -> InputError:
    return InputError(
        f"unsupported CMDQ version {version!r}: this kernbench reads 1.x "
        f"(writes {CMDQ_VERSION})",
        file=file, where="metadata", field="version",
    )


# --------------------------------------------------------------------------- messages


def _unknown_opcode(opcode: object) -> str:
    if isinstance(opcode, str):
        known = list(MODEL_BY_OPCODE)
        close = difflib.get_close_matches(opcode.upper(), known, n=1, cutoff=0.85)
        if close:
            return f"unknown opcode {_show(opcode)} (did you mean {close[0]}?)"
        return f"unknown opcode {_show(opcode)} (known: {', '.join(known)})"
    return f"must be an opcode string, got {_show(opcode)}"


def _where(raw: object, index: int) -> str:
    if isinstance(raw, Mapping):
        ident = raw.get("id")
        if isinstance(ident, int) and not isinstance(ident, bool) and ident >= 0:
            return f"entry {ident}"
    return f"entry at index {index}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _show(value: object, limit: int = 40) -> str:
    try:
        text = json.dumps(value, allow_nan=True, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TYPE_NAMES = {
    "int_type": "an integer", "int_from_float": "an integer", "int_parsing": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "bool_type": "a boolean (true/false)", "list_type": "a list", "dict_type": "an object",
    "model_type": "an object",
}


def _reason(err: Mapping[str, Any], field: str, qbits: tuple[str, ...] = ()) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "required field is missing"
    if field in qbits and kind in ("literal_error", "int_type", "int_from_float"):
        allowed = ", ".join(str(q) for q in QBITS_ALLOWED)
        return f"must be one of {allowed}, got {_show(value)}"
    if field == "pe":
        return ("must be a PE index (integer >= 0) or a dotted PE path like "
                f"'sip0.cube0.pe3', got {_show(value)}")
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}, got {_show(value)}"
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}, got {_show(value)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {_show(value)}"
    if kind == "finite_number":
        return f"must be a finite number, got {_show(value)}"
    if kind in _TYPE_NAMES:
        return f"must be {_TYPE_NAMES[kind]}, got {_show(value)}"
    msg = str(err.get("msg", kind))
    return f"{msg[:1].lower()}{msg[1:]}, got {_show(value)}"


def _convert(exc: ValidationError, *, file: str | None, where: str,
             qbits: tuple[str, ...] = ()) -> list[InputError]:
    """One InputError per offending top-level field of a pydantic error."""
    out: list[InputError] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        field = str(loc[0]) if loc else None
        key = field or ""
        if key in seen:
            continue  # a union reports each branch; keep the first line per field
        seen.add(key)
        reason = _reason(err, field or "", qbits)
        rest = [] if field == "pe" else list(loc[1:])  # pe: drop the union branch names
        if rest:
            reason = f"at [{']['.join(str(p) for p in rest)}]: {reason}"
        out.append(InputError(reason, file=file, where=where, field=field))
    return out


# --------------------------------------------------------------------------- writing

_LEADING = ("opcode", "id", "layer_id", "pe")
_TRAILING = ("deps_before", "deps_after", "debug")


def _key_order(model: type[EntryBase]) -> tuple[str, ...]:
    middle = [f for f in model.model_fields if f not in _LEADING and f not in _TRAILING]
    return (*_LEADING, *middle, *_TRAILING)


_KEY_ORDER: dict[type[EntryBase], tuple[str, ...]] = {
    m: _key_order(m) for m in MODEL_BY_OPCODE.values()
}


def entry_to_obj(entry: EntryBase) -> dict[str, Any]:
    """An entry as a JSON object: declared fields in a fixed order (optional fields whose
    value is null are left out, except ``layer_id``), then extra fields as given."""
    data = entry.model_dump(mode="json")
    fields = type(entry).model_fields
    out: dict[str, Any] = {}
    for key in _KEY_ORDER.get(type(entry)) or _key_order(type(entry)):
        value = data.pop(key)
        if value is None and key != "layer_id" and fields[key].default is None:
            continue
        out[key] = value
    out.update(data)  # extras, in their own order
    return out


def program_to_obj(program: CmdqProgram) -> dict[str, Any]:
    """The program as a JSON-ready dict (same content as `dumps_program`)."""
    meta = program.metadata.model_dump(mode="json", exclude_none=True)
    out: dict[str, Any] = {"cmdq": [entry_to_obj(e) for e in program.cmdq], "metadata": meta}
    for key, value in (program.model_extra or {}).items():
        out[key] = value
    return out


def dumps_program(program: CmdqProgram) -> str:
    """Deterministic JSON text: one entry per line, metadata indented, trailing newline."""
    obj = program_to_obj(program)
    lines = ["{", '  "cmdq": [']
    entries = obj.pop("cmdq")
    for i, entry in enumerate(entries):
        comma = "," if i + 1 < len(entries) else ""
        lines.append("    " + json.dumps(entry, ensure_ascii=False, allow_nan=False) + comma)
    lines.append("  ]" + ("," if obj else ""))
    rest = list(obj.items())
    for i, (key, value) in enumerate(rest):
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=2)
        text = text.replace("\n", "\n  ")
        comma = "," if i + 1 < len(rest) else ""
        lines.append(f"  {json.dumps(key)}: {text}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dump_program(program: CmdqProgram, path: str | os.PathLike[str]) -> None:
    """Write the program to ``path`` (atomically: a temporary file, then rename)."""
    target = Path(path)
    text = dumps_program(program)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
