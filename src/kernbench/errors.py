"""Errors every layer shares.

`InputError` is the one exception that means "the user gave us something invalid".
The CLI turns it into exactly one line on stderr and exit code 2; anything else that
escapes is an internal error (exit 3). Keep the message to one line: it names the file,
the entry or node, the field and the reason.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator


class KernbenchError(Exception):
    """Base class of kernbench's own exceptions."""

    exit_code = 3


class InputError(KernbenchError):
    """Invalid user input: a config, a CMDQ program, an IR file, an ONNX model.

    Build it with the parts of the location you know; `str()` joins them into one line:
    ``file: entry 12: field 'qbits': must be one of 2, 4, 8, 16, 32``.
    """

    exit_code = 2

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        where: str | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.where = where
        self.field = field
        super().__init__(self.line())

    def line(self) -> str:
        parts = []
        if self.file:
            parts.append(str(self.file))
        if self.where:
            parts.append(self.where)
        if self.field:
            parts.append(f"field '{self.field}'")
        parts.append(self.reason)
        return ": ".join(parts).replace("\n", " ")


class VerificationError(KernbenchError):
    """A numerical check failed (exit code 1)."""

    exit_code = 1


class SimulationError(KernbenchError):
    """The hardware model reached an impossible state (deadlock, TCM overflow, bad address)."""

    exit_code = 3


class DeadlockError(SimulationError):
    """The simulation stopped with work still pending."""


class CapacityError(SimulationError):
    """A memory (TCM, HBM, SRAM) was asked for more bytes than it has."""


class AddressError(SimulationError):
    """An access fell outside the memory it addresses."""


def warn(message: str, key: object = None) -> None:
    """One `warning: ...` line on stderr: something suspicious that does not stop the run
    (a NaN in the weights, a QConfig glob that matches nothing). Kept here so every layer
    reports warnings the same way without importing the CLI. Within `warnings_once`, a
    warning already given is not given again: the same line, or the same `key` (for a
    warning whose details, such as node names, differ from one program of a model to
    the next while its substance does not)."""
    line = f"warning: {message}".replace("\n", " ")
    if _GIVEN is not None:
        seen = line if key is None else ("key", key)
        if seen in _GIVEN:
            return
        _GIVEN.add(seen)
    print(line, file=sys.stderr)


#: the warnings (lines or keys) given so far while `warnings_once` is on (None: off)
_GIVEN: set[object] | None = None


@contextlib.contextmanager
def warnings_once() -> Iterator[None]:
    """Within: each distinct warning line is given once. A serving run compiles many
    programs of one model; what they warn about (a layer that runs whole) is the
    model's, and said once."""
    global _GIVEN
    old = _GIVEN
    _GIVEN = set() if old is None else old
    try:
        yield
    finally:
        _GIVEN = old


def warn_each_once() -> None:
    """`warnings_once` for the rest of this process's life (a serving run's worker)."""
    global _GIVEN
    if _GIVEN is None:
        _GIVEN = set()


# Size limits of the files kernbench reads (docs/errors.md). A file above its limit is
# refused before it is read; a device or FIFO is refused before it is opened (reading
# /dev/zero never ends, opening a FIFO blocks until a writer comes).
MAX_TEXT_BYTES = 1 << 20  # topology YAML, QConfig YAML
MAX_JSON_BYTES = 1 << 30  # cmdq.json, memory.json, ir.json
MAX_MODEL_BYTES = 1 << 31  # model.onnx (protobuf's own 2 GiB limit) and .npz files


def check_input_file(path: object, limit: int, *, label: str | None = None) -> int:
    """Refuse (InputError) a path that is missing, not a regular file, or larger than
    `limit` bytes; return its size. Never opens the file."""

    label = label or str(path)
    try:
        st = os.stat(str(path))
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=label) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a folder, expected a file", file=label)
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a device, FIFO or socket)", file=label)
    if st.st_size > limit:
        raise InputError(f"{st.st_size} bytes, larger than the limit of {limit} bytes",
                         file=label)
    return st.st_size


def read_input_bytes(path: object, limit: int, *, label: str | None = None) -> bytes:
    """The bytes of a user's file, read with a bound (check_input_file first)."""
    label = label or str(path)
    check_input_file(path, limit, label=label)
    try:
        with open(str(path), "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=label) from None
    if len(data) > limit:  # grew while we looked
        raise InputError(f"larger than the limit of {limit} bytes", file=label)
    return data


def read_input_text(path: object, limit: int, *, label: str | None = None) -> str:
    """A user's text file as str: bounded (read_input_bytes) and strictly UTF-8."""
    label = label or str(path)
    data = read_input_bytes(path, limit, label=label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start}",
                         file=label, where=f"line {line}") from None


def did_you_mean(word: object, known: list[str] | tuple[str, ...]) -> str:
    """`" (did you mean 'x'?)"` for the closest of `known` to `word` (difflib ratio ≥ 0.6),
    or `""` when none is close: appended to an "unknown ..." reason, it keeps the line one
    line."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
