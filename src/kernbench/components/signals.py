"""Signal: a completion with the shape of a SimPy event that runs its callbacks at once.

A command's completion (`PeCommand.done`) and a tile group's (`PipelineContext`) only
forward to the next step at the same instant. As SimPy events they cost a scheduled event
each and run their callbacks later in the same instant; a Signal runs them when it is
triggered. Same-instant order does not decide any reservation (components.arbiter
does), so this changes no time. Code that must wait on a completion in a
SimPy process (the kernel runner) is given a real event instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Signal:
    """`succeed(value)` marks it triggered and calls every callback with this signal, whose
    `value` is `value` while they run (as SimPy calls an event's callbacks with the
    event). The callbacks and the value are dropped afterwards."""

    __slots__ = ("callbacks", "triggered", "value")

    def __init__(self, *callbacks: Callable[[Any], None]) -> None:
        self.callbacks = list(callbacks)
        self.triggered = False
        self.value: Any = None

    def succeed(self, value: object = None) -> Signal:
        if self.triggered:
            raise RuntimeError("signal triggered twice")
        self.triggered = True
        self.value = value
        callbacks, self.callbacks = self.callbacks, []
        for cb in callbacks:
            cb(self)
        # a value that refers back to its signal (a PipelineContext) would make a cycle
        # the garbage collector has to find: forget it once delivered
        self.value = None
        return self
