"""Compile ahead: a streamed program's compiler runs in a child process while the
simulator, in this one, runs the entries it has already sent (issue 38: the two cores of
a laptop or the CI machine, not one).

A streamed run (`flow.compile_for_run`, compiled layer by layer) interleaves two
single-threaded jobs in one process: lowering the next layer when the Control FSM first
reads one of its entries, and simulating. `ahead(chunks)` forks after the survey (the
compiler's state is the child's copy), iterates `chunks` there, and sends each chunk of
entry dicts back through a pipe, a line of JSON each (as cmdq.json holds them: what the
parent reads back is data, never code); the parent's iterator yields them in the same
order. The child runs the same code on the same state, so the entries, and every output
of the run, are byte-identical to the in-process stream (tests/host/test_compile_ahead.py).

Contract:
- The pipe bounds how far the child runs ahead (its buffer and one chunk in flight), so
  host memory still follows the layers, not the program, as in-process.
- An exception in the child (an InputError naming a layer, a compiler bug) is raised in
  the parent when it reaches that point of the stream: kernbench's errors as the same
  class with the same line (so the same exit code), any other as a RuntimeError with its
  class name and text. A child that dies without a word is a RuntimeError, never a hang.
- Closing the iterator (the stream read to its end, an error, Ctrl-C in the parent)
  kills and reaps the child. The child ignores SIGINT (the parent decides); what it
  writes on stdout or stderr (a warning) travels through the pipe and is written on the
  parent's stderr; it leaves by `os._exit`, running no exit handlers of the parent's.
- Without `os.fork` (Windows) or with fewer than two usable CPUs, `ahead` is not used
  (`available`): the stream runs in-process, with the same results. A fork that fails
  (no process or memory to spare) says so on stderr and runs the stream in-process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO

from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.stream import EntryStream, checked_chunks
from kernbench.errors import (
    AddressError,
    CapacityError,
    DeadlockError,
    InputError,
    KernbenchError,
    SimulationError,
    VerificationError,
    warn,
)

Chunk = list[dict[str, Any]]


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def available() -> bool:
    """Whether compiling ahead can run beside the simulation: `os.fork` exists and two or
    more CPUs are usable."""
    return hasattr(os, "fork") and usable_cpus() >= 2


def ahead(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """`chunks`, produced in a forked child (module docstring). The caller must not
    advance `chunks` itself afterwards; the returned iterator has `close()`."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:  # the child: never returns
        os.close(r)
        _produce(chunks, w)
    os.close(w)
    return _consume(os.fdopen(r, "rb", buffering=1 << 16), pid)


def entry_stream(chunks: Iterator[Chunk], n: int, layer_entries: Mapping[str, int],
                 limits: CmdqLimits, file: str | None, *, in_child: bool,
                 pes: Callable[[], list[int | str]] | None = None) -> EntryStream:
    """The `EntryStream` of a program whose `n` entries come from `chunks`: with
    `in_child`, the chunks are produced and checked in a child process (`ahead`), else
    read and checked here as the simulator reaches them."""
    if in_child:
        try:
            chunks = ahead(checked_chunks(chunks, n, limits, file))
        except OSError as e:  # `chunks` is untouched: compiled here instead, and said so
            warn(f"compile ahead: no child process ({e.strerror or e}); compiling in this "
                 "process (the same results)")
            in_child = False
    return EntryStream(chunks, n, layer_entries, limits, file, pes=pes, checked=in_child)


def _produce(chunks: Iterator[Chunk], fd: int) -> None:
    """The child's whole life: send every chunk, then ["end", null] or the error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status = 0
    try:
        with os.fdopen(fd, "wb", buffering=1 << 16) as out:
            # new stream objects: another thread of the parent (a progress display) may
            # have held the old ones' locks at the fork; what is written goes to the parent
            sys.stdout = sys.stderr = _Relay(out)
            try:
                for chunk in chunks:
                    _send(out, "chunk", chunk)
                    out.flush()  # the parent may be waiting for exactly this chunk
                _send(out, "end", None)
            except BaseException as e:  # noqa: BLE001 - every failure goes to the parent
                status = 1
                _send(out, "error", _error_of(e))
    except BaseException:  # noqa: BLE001 - the parent has gone (a broken pipe): nothing to tell
        status = 1
    finally:
        os._exit(status)  # no exit handlers, no flush of the parent's buffered output


def _send(out: BinaryIO, kind: str, value: object) -> None:
    """One message: a line of JSON, [kind, value] (entry dicts are JSON, as in cmdq.json;
    nothing read back can run code)."""
    out.write(json.dumps([kind, value], separators=(",", ":")).encode() + b"\n")


class _Relay(io.TextIOBase):
    """The child's stdout and stderr: each write is a ["stderr", text] message that the
    parent writes on its own stderr, in order with the chunks."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        _send(self._out, "stderr", s)
        return len(s)


def _error_of(e: BaseException) -> dict[str, str | None]:
    """What the parent needs to raise `e` again: its class name, its text and, for an
    InputError, the parts of its location."""
    out: dict[str, str | None] = {"type": type(e).__name__, "text": str(e)}
    if isinstance(e, InputError):
        out |= {"reason": e.reason, "file": e.file, "where": e.where, "field": e.field}
    return out


#: kernbench's errors a child's failure is raised again as (the same exit code); any
#: other exception is a RuntimeError with its class name and text
_ERRORS: dict[str, type[KernbenchError]] = {
    c.__name__: c for c in (KernbenchError, VerificationError, SimulationError,
                            DeadlockError, CapacityError, AddressError)}


def _raised(err: dict[str, str | None]) -> BaseException:
    """The exception the child sent (`_error_of`), built again here."""
    if err.get("type") == "InputError":
        return InputError(str(err["reason"]), file=err["file"], where=err["where"],
                          field=err["field"])
    cls = _ERRORS.get(str(err.get("type")))
    if cls is not None:
        return cls(err["text"])
    return RuntimeError(f"the compiler's child process failed: {err['type']}: {err['text']}")


def _consume(f: BinaryIO, pid: int) -> Iterator[Chunk]:
    """The parent's side: the child's chunks in order; the child killed and reaped when
    this iterator ends or is closed."""
    try:
        while True:
            line = f.readline()
            if not line.endswith(b"\n"):  # EOF, or a message cut short: the child died
                raise RuntimeError("the compiler's child process ended before the program "
                                   f"did (exit status {_reap(pid)})")
            kind, value = json.loads(line)
            if kind == "chunk":
                yield value
            elif kind == "end":
                return
            elif kind == "stderr":  # a warning the compiler printed in the child
                sys.stderr.write(value)
            else:
                raise _raised(value)
    finally:
        f.close()
        _reap(pid)


def _reap(pid: int) -> int | None:
    """Kill the child if it still runs and collect it; its exit status (None if it was
    collected already)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


__all__ = ["ahead", "available", "entry_stream", "usable_cpus"]
