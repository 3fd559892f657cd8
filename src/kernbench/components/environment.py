"""GrantingEnvironment: the simulator's SimPy environment, whose clock waits for grants.

A `simpy.Environment` that grants its arbiter's requests (components.arbiter) at the end
of each simulated instant: `step` is SimPy's, preceded by the grant when no event is left
at the current time, and `run` is SimPy's `run` around `arbiter.run_events`, the same
loop compiled where the install can (it runs once per event and per grant). It is a class
of its own because a compiled module cannot extend SimPy's interpreted environment.
"""

from __future__ import annotations

from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import URGENT, Event

from kernbench.components.arbiter import Arbiter, run_events


class GrantingEnvironment(simpy.Environment):
    """A SimPy environment that grants its arbiter's requests at the end of each instant."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.arbiter = Arbiter()

    def run(self, until: float | Event | None = None) -> Any:
        """SimPy's `run`, its loop `run_events`."""
        if until is not None:
            if not isinstance(until, Event):
                at = until if isinstance(until, int) else float(until)
                if at <= self._now:
                    raise ValueError(
                        f"until ({at}) must be greater than the current simulation time")
                until = Event(self)
                until._ok = True
                until._value = None
                self.schedule(until, URGENT, at - self._now)
            elif until.callbacks is None:
                return until.value
            until.callbacks.append(StopSimulation.callback)
        try:
            run_events(self, self.arbiter)
        except StopSimulation as exc:
            return exc.args[0]
        except EmptySchedule:
            if until is not None:
                raise RuntimeError(f'No scheduled events left but "until" event was not '
                                   f"triggered: {until}") from None
        return None

    def step(self) -> None:
        """One step: the pending grant, if no event is left at the current time, else the
        next event."""
        run_events(self, self.arbiter, 1)
