"""Errors every layer shares.

`InputError` is the one exception that means "the user gave us something invalid".
The CLI turns it into exactly one line on stderr and exit code 2; anything else that
escapes is an internal error (exit 3). Keep the message to one line: it names the file,
the entry or node, the field and the reason.
"""

from __future__ import annotations


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
