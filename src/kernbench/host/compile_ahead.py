"""Compile ahead: a streamed program's compiler runs in a child process while the
simulator, in this one, runs the entries it has already sent (issue 38: the two cores of
a laptop or the CI machine, not one).

A streamed run (`flow.compile_for_run`, compiled layer by layer) interleaves two
single-threaded jobs in one process: lowering the next layer when the Control FSM first
reads one of its entries, and simulating. `ahead(chunks)` forks after the survey (the
compiler's state is the child's copy), iterates `chunks` there, and sends each chunk back
through a pipe as JSON (`common.entry_codec`: what the parent reads back is data, never
code, Control-FSM entries included); the parent's iterator yields them in the same order.
`entry_stream` gives the child more of the work than the compiler's: it parses, checks
and lowers each chunk to the Control FSM's entries (`cmdq.hw.lowered_chunks`), so that
the parent, which runs the simulation and is the slower of the two, only reads them
back. The child runs the same code on the same state, so the entries, and every output
of the run, are byte-identical to the in-process stream (tests/host/test_compile_ahead.py).

Contract:
- The pipe bounds how far the child runs ahead (its buffer, made as large as the OS lets
  this process make it, up to `PIPE_BYTES`, and one chunk in flight), so host memory
  still follows the layers, not the program, as in-process.
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
from typing import TYPE_CHECKING, Any, BinaryIO

from kernbench.cmdq.hw import lowered_chunks
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.stream import EntryStream, checked_chunks
from kernbench.common import entry_codec
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

if TYPE_CHECKING:
    from kernbench.topology.model import Topology

Chunk = list[Any]

# a message: its kind (one byte), its payload's length (8 bytes, little-endian), the payload
_CHUNK, _END, _STDERR, _ERROR = b"c", b"e", b"s", b"x"
_HEAD = 9


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
    _widen(w)
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


#: the pipe's capacity asked for (bytes): room for several of a real-size model's chunks,
#: so that the child can run ahead of the parent
PIPE_BYTES = 8 << 20


def _widen(fd: int) -> None:
    """Make the pipe as large as this process may, up to PIPE_BYTES (Linux: up to
    /proc/sys/fs/pipe-max-size, 1 MiB by default). With the default 64 KiB the child can
    run only about a chunk ahead, and the parent waits for it wherever a layer takes
    longer to compile than the one before took to simulate. Elsewhere, or when refused,
    the pipe keeps its size: the same results, a little later."""
    try:
        import fcntl
        setsz = fcntl.F_SETPIPE_SZ
        with open("/proc/sys/fs/pipe-max-size", encoding="ascii") as f:
            most = int(f.read())
        fcntl.fcntl(fd, setsz, min(most, PIPE_BYTES))
    except (ImportError, AttributeError, OSError, ValueError):
        return


def entry_stream(chunks: Iterator[Chunk], n: int, layer_entries: Mapping[str, int],
                 limits: CmdqLimits, file: str | None, *, in_child: bool,
                 pes: Callable[[], list[int | str]] | None = None,
                 topology: Topology | None = None) -> EntryStream:
    """The `EntryStream` of a program whose `n` entries come from `chunks`: with
    `in_child`, the chunks are produced and checked in a child process (`ahead`), and with
    `topology` (the one the program is simulated on) lowered there too; else read and
    checked here as the simulator reaches them."""
    lowered = in_child and topology is not None
    if in_child:
        try:
            chunks = ahead(lowered_chunks(chunks, n, limits, topology, file) if lowered
                           else checked_chunks(chunks, n, limits, file))
        except OSError as e:  # `chunks` is untouched: compiled here instead, and said so
            warn(f"compile ahead: no child process ({e.strerror or e}); compiling in this "
                 "process (the same results)")
            in_child = lowered = False
    return EntryStream(chunks, n, layer_entries, limits, file, pes=pes, checked=in_child,
                       lowered=lowered)


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
                    _send(out, _CHUNK, entry_codec.dumps(chunk))
                    out.flush()  # the parent may be waiting for exactly this chunk
                _send(out, _END, b"")
            except BaseException as e:  # noqa: BLE001 - every failure goes to the parent
                status = 1
                _send(out, _ERROR, json.dumps(_error_of(e)).encode())
    except BaseException:  # noqa: BLE001 - the parent has gone (a broken pipe): nothing to tell
        status = 1
    finally:
        os._exit(status)  # no exit handlers, no flush of the parent's buffered output


def _send(out: BinaryIO, kind: bytes, payload: bytes) -> None:
    """One message: `kind`, the payload's length, the payload."""
    out.write(kind + len(payload).to_bytes(_HEAD - 1, "little") + payload)


class _Relay(io.TextIOBase):
    """The child's stdout and stderr: each write is a ["stderr", text] message that the
    parent writes on its own stderr, in order with the chunks."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        _send(self._out, _STDERR, s.encode("utf-8", "backslashreplace"))
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
            head = f.read(_HEAD)
            size = int.from_bytes(head[1:], "little")
            payload = f.read(size) if len(head) == _HEAD else b""
            if len(head) < _HEAD or len(payload) < size:  # EOF, or a message cut short
                raise RuntimeError("the compiler's child process ended before the program "
                                   f"did (exit status {_reap(pid)})")
            kind = head[:1]
            if kind == _CHUNK:
                yield entry_codec.loads(payload)
            elif kind == _END:
                return
            elif kind == _STDERR:  # a warning the compiler printed in the child
                sys.stderr.write(payload.decode("utf-8"))
            else:
                raise _raised(json.loads(payload))
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
