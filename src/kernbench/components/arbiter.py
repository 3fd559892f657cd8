"""The arbiter: same-instant requests for contended resources are granted oldest first.

Every reservation of a contended resource (a link, an HBM channel, a TCM port: the
reservation servers of components.fabric) is made through `Arbiter.request` with a key
(command sequence, tile, stage index). The arbiter grants the requests of one simulated
instant together, at the end of that instant, in key order: the oldest command first,
then the lower tile, then the earlier stage. Requests at different instants
are still first come, first served.

"The end of the instant" is when SimPy has no event left at the current time: the
simulator's environment (`GrantingEnvironment`, a `simpy.Environment` whose `step`
grants before it advances the clock) runs the pending grant then, after every event of
that instant, including those scheduled while the instant is processed. So which requests
meet in one grant depends on nothing but their time and on grants they causally follow,
not on how many zero-delay events each chain took to get there. A grant's outcome (a
completion event at the transfer's end) can start new requests at the same instant; they
meet in the next grant of that instant. A grant is not a SimPy event.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, URGENT, Event, EventPriority

from kernbench.common.pe_commands import PeCommand
from kernbench.common.tile_plan import TileToken


class Arbiter:
    """Collects the requests of the current instant; its environment grants them."""

    __slots__ = ("pending", "grants")

    def __init__(self) -> None:
        self.pending: list[tuple[Any, int, Callable[..., None], tuple]] = []
        self.grants = 0

    def request(self, key: tuple, grant: Callable[..., None], *args: object) -> None:
        """Call `grant(*args)` at the end of this instant, after every request of the
        instant with a smaller `key` (keys of one instant are distinct; equal keys keep
        request order, which no caller relies on)."""
        pending = self.pending
        pending.append((key, len(pending), grant, args))

    def grant(self) -> None:
        """Grant every pending request, in key order (the environment calls this)."""
        batch = self.pending
        self.pending = []
        self.grants += 1
        if len(batch) > 1:
            # (key, request number, ...): the numbers are distinct, so the sort never
            # compares past them and orders by key, then request order
            batch.sort()
        for _key, _n, grant, args in batch:
            grant(*args)


class GrantingEnvironment(simpy.Environment):
    """A SimPy environment that grants its arbiter's requests at the end of each instant:
    `step` is SimPy's, preceded by the grant when no event is left at the current time."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.arbiter = Arbiter()

    def run(self, until: float | Event | None = None) -> Any:
        """SimPy's `run`, with `step` inlined in its loop (the loop runs once per event
        and per grant, so the call is a measurable share of a run)."""
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
        arbiter = self.arbiter
        queue = self._queue
        try:
            while True:
                if arbiter.pending and (not queue or queue[0][0] > self._now):
                    arbiter.grant()
                    continue
                try:
                    self._now, _, _, event = heappop(queue)
                except IndexError:
                    raise EmptySchedule from None
                callbacks, event.callbacks = event.callbacks, None
                try:
                    for callback in callbacks:
                        callback(event)
                except StopSimulation:
                    event.callbacks = callbacks[callbacks.index(callback) + 1:]
                    self.schedule(event, EventPriority(-1))
                    raise
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
        except StopSimulation as exc:
            return exc.args[0]
        except EmptySchedule:
            if until is not None:
                raise RuntimeError(f'No scheduled events left but "until" event was not '
                                   f"triggered: {until}") from None
        return None

    def step(self) -> None:
        arbiter = self.arbiter
        if arbiter.pending:
            queue = self._queue
            if not queue or queue[0][0] > self._now:
                arbiter.grant()
                return
        try:
            self._now, _, _, event = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            # as SimPy: keep the remaining callbacks for when the simulation resumes
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


def done_at(env: simpy.Environment, ev: Event, t: float) -> None:
    """Trigger the pending event `ev` (successfully, value None) at time `t` ≥ now."""
    ev._ok = True
    ev._value = None
    now = env._now
    heappush(env._queue, (now + (t - now), NORMAL, next(env._eid), ev))  # env.schedule


def call_after(env: simpy.Environment, delay: float, fn: Callable[[Event], None]) -> None:
    """Call `fn(event)` `delay` ns from now: the one event `env.timeout(delay)` with `fn`
    as its callback is, without a Timeout object."""
    ev = Event.__new__(Event)
    ev.env = env
    ev.callbacks = [fn]
    ev._ok = True
    ev._value = None
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), ev))  # env.schedule


def pending(env: simpy.Environment) -> Event:
    """A pending event, for a service whose end a grant decides."""
    ev = Event.__new__(Event)
    ev.env = env
    ev.callbacks = []
    ev._value = simpy.events.PENDING
    return ev


def token_key(token: TileToken) -> tuple[int, int, int]:
    """The arbitration key of a tile's current stage: (command sequence, tile, stage)."""
    return token.pipeline_ctx.command.meta.get("seq", 0), token.tile_id, token.stage_idx


#: the tile position of a command's completion packet in its arbitration key: after
#: every tile of the command
BACK_TILE = 1 << 62


def command_key(cmd: PeCommand, back: bool) -> tuple[int, int, int]:
    """The key of a command's packet (out to its PE, or its completion `back`): before any
    tile of the command, or after every one."""
    return cmd.meta.get("seq", 0), BACK_TILE if back else -1, 0

