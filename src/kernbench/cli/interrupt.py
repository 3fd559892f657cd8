"""Ctrl-C always ends a command: exit 130, one "interrupted" line, nothing half-written.

The first SIGINT raises KeyboardInterrupt in the main thread as usual; the command unwinds,
its staging folder is removed (cli.outdir) and `main` prints "interrupted" and returns 130.
Two things can keep that from happening: user code that catches the KeyboardInterrupt (a
kernel's `try: ... except BaseException: pass` inside a loop), and a main thread stuck in a
long C call (Python runs signal handlers between bytecodes only). So a watchdog thread
also learns of every SIGINT through `signal.set_wakeup_fd` (written by the C-level
handler, whatever the main thread does) and, if the command has not ended `GRACE_S`
seconds later, removes the registered staging folders, prints "interrupted" and ends the
process with `os._exit(130)`.

A Ctrl-C that lands where Python cannot raise it (a finalizer, a callback inside an import)
is not reported as "Exception ignored ... Traceback" and lost: the watchdog ends the command
at once, as it would after the grace period (it cannot be raised again safely: raised from
another thread it can land inside the same hook and be lost again).

SIGTERM (`kill`, `timeout`, a batch scheduler) ends a command the same way (exit 130,
"interrupted", no stage left), also where SIGINT is ignored (a job started with `nohup` or
`&`): while a command runs its handler raises KeyboardInterrupt, `deferred_interrupt()`
holds it back too, and the watchdog watches it like a Ctrl-C. A SIGTERM handler the caller
installed is left in place.

`deferred_interrupt()` holds Ctrl-C back over a short critical section (moving a finished
run into --out): the interrupt takes effect right after it, so --out is never half moved.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

GRACE_S = 3.0
INTERRUPTED = 130

_stages: set[Path] = set()
_lock = threading.Lock()


def register_stage(path: Path) -> None:
    """A staging folder the watchdog removes before it ends the process."""
    with _lock:
        _stages.add(Path(path))


def unregister_stage(path: Path) -> None:
    with _lock:
        _stages.discard(Path(path))


def discard_stage(path: Path) -> None:
    """Remove a staging folder and forget it."""
    shutil.rmtree(path, ignore_errors=True)
    unregister_stage(path)


def discard_stages() -> None:
    """Remove every staging folder still registered: an interrupted command ends with
    none left, wherever the interrupt landed."""
    with _lock:
        stages = list(_stages)
    for p in stages:
        discard_stage(p)


def _force_exit() -> None:
    discard_stages()
    with contextlib.suppress(OSError):
        os.write(2, b"\ninterrupted\n")
    os._exit(INTERRUPTED)


_ENDING = (signal.SIGINT, signal.SIGTERM)


def _term_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM unwinds the command as a Ctrl-C does (see the module docstring)."""
    raise KeyboardInterrupt


class Watchdog:
    """Context manager around one command (see the module docstring), in the main thread
    only: the SIGTERM handler where SIGTERM has its default action, the watchdog thread
    where SIGINT is Python's KeyboardInterrupt handler or SIGTERM is ours (a SIGTERM
    whose KeyboardInterrupt is lost must end the command too, SIGINT ignored or not)."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self.done = threading.Event()
        self.old_fd: int | None = None
        self.old_hook = sys.unraisablehook
        self.lost = threading.Event()
        self.pipe: tuple[int, int] | None = None
        self.old_term: object = None

    def __enter__(self) -> Watchdog:
        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self.old_term = signal.signal(signal.SIGTERM, _term_as_interrupt)
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler \
                and self.old_term is None:
            return self  # neither signal raises here: nothing to watch
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            self.old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return self
        self.pipe = (r, w)
        self.old_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        threading.Thread(target=self._watch, args=(r,), daemon=True,
                         name="kernbench-sigint-watchdog").start()
        return self

    def _watch(self, r: int) -> None:
        try:
            while True:
                data = os.read(r, 64)
                if not data:  # the command ended: the write end is closed
                    return
                if self.lost.is_set() or (any(s in data for s in _ENDING)
                                          and not self.done.wait(self.grace_s)):
                    _force_exit()
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(r)

    def _unraisable(self, unraisable) -> None:  # noqa: ANN001
        """A KeyboardInterrupt Python could not raise ends the command at once (see the
        module docstring); any other unraisable error goes to the hook there was."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.pipe is not None:
            self.lost.set()
            with contextlib.suppress(OSError):
                os.write(self.pipe[1], b"\0")  # wakes the watchdog; 0 is no signal number
        else:
            self.old_hook(unraisable)

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.old_term is not None:
            signal.signal(signal.SIGTERM, self.old_term)
            self.old_term = None
        if self.pipe is None:
            return
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(self.old_fd if self.old_fd is not None else -1)
        sys.unraisablehook = self.old_hook
        os.close(self.pipe[1])  # the watchdog reads EOF and ends; it closes nothing else
        self.pipe = None


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a SIGINT (Python's default handler in force) or a SIGTERM (the command's
    handler in force) back until the block ends, then raise KeyboardInterrupt; in another
    thread, or with other handlers, the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit: list[int] = []
    held = {sig: signal.signal(sig, lambda signum, _frame: hit.append(signum))
            for sig, ours in ((signal.SIGINT, signal.default_int_handler),
                              (signal.SIGTERM, _term_as_interrupt))
            if signal.getsignal(sig) is ours}
    try:
        yield
    finally:
        for sig, old in held.items():
            signal.signal(sig, old)
    if hit:
        sys.stderr.flush()
        raise KeyboardInterrupt
