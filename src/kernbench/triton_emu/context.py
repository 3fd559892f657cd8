"""The tl context: which grid program is running, kernel errors, and where a call came from.

The KernelRunner sets `CTX[0]` to the running Program on every greenlet switch; every tl
op that needs the hardware calls `prog()` and sends it a request. Nothing here imports the
rest of triton_emu, so every other module of the front end may import it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from kernbench.errors import InputError


class KernelError(InputError):
    """A kernel did something invalid (out-of-bounds access, TCM overflow, bad op)."""


class PendingValueError(KernelError):
    """A compute result's data was touched in pass 1."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def kernel_line() -> str:
    """`file:line` of the innermost kernel frame (first frame outside triton_emu)."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG_DIR) and not fn.endswith(os.sep + "tl.py"):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<kernel>:?"



CTX: list[Any] = [None]  # the running Program (set by the runner on every switch)


def prog() -> Any:
    """The running grid program; KernelError outside a kernel launch."""
    p = CTX[0]
    if p is None:
        raise KernelError("tl.* called outside a kernel launch (use kernel[grid](...))")
    return p
