"""The arbiter: same-instant requests for contended resources are granted oldest first.

Every reservation of a contended resource (a link, an HBM channel, a TCM port: the
reservation servers of components.fabric) is made through `Arbiter.request` with a key
(command sequence, tile, stage index). The arbiter grants the requests of one simulated
instant together, at the end of that instant, in key order: the oldest command first,
then the lower tile, then the earlier stage. Requests at different instants
are still first come, first served.

"The end of the instant" is when SimPy has no event left at the current time: the
simulator's environment (components.environment's `GrantingEnvironment`, a
`simpy.Environment` whose `step` grants before it advances the clock, with `run_events`
as its loop) runs the pending grant then, after every event of
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
from simpy.events import NORMAL, PENDING, EventPriority

from kernbench.common.pe_commands import PeCommand
from kernbench.common.tile_plan import TileToken


class Arbiter:
    """Collects the requests of the current instant; its environment grants them."""

    __slots__ = ("pending", "grants", "met")

    def __init__(self) -> None:
        self.pending: list[tuple[Any, int, Callable[..., None], tuple]] = []
        self.grants = 0
        self.met = 0  # grants where two requests or more met: what the key order decided

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
            self.met += 1
            # (key, request number, ...): the numbers are distinct, so the sort never
            # compares past them and orders by key, then request order
            batch.sort()
        for _key, _n, grant, args in batch:
            grant(*args)


def run_events(env: simpy.Environment, arbiter: Arbiter, steps: int = -1) -> None:
    """Process `env`'s events, and `arbiter`'s grants at the end of each instant, until
    the schedule is empty (`EmptySchedule`), an event stops the simulation
    (`StopSimulation`, after keeping the stopping event's remaining callbacks as SimPy
    does) or `steps` steps (a grant or an event each) are done; -1: no limit. SimPy's
    `Environment.step` in a loop, with the grant before the clock moves;
    `GrantingEnvironment` (components.environment) runs it."""
    queue: list = env._queue
    now: Any = env._now
    while steps:
        steps -= 1
        if arbiter.pending and (not queue or queue[0][0] > now):
            arbiter.grant()
            continue
        try:
            now, _, _, event = heappop(queue)
        except IndexError:
            raise EmptySchedule from None
        env._now = now
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            # as SimPy: keep the remaining callbacks for when the simulation resumes
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            env.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


class LoopEvent:
    """What the event loop (`run_events`) reads of a SimPy event: its callbacks, `_ok`,
    `_value` and `env`, in fixed slots, without a SimPy event's instance dict. The events
    `call_after` schedules and those `pending` returns are these: only the loop and the
    component that made them see them (no process waits on them, no condition holds them),
    and they take their place in SimPy's queue as SimPy's own would (time, priority,
    sequence number)."""

    __slots__ = ("env", "callbacks", "_ok", "_value")

    def __init__(self, env: simpy.Environment, callbacks: list[Callable[[Any], None]],
                 value: object) -> None:
        self.env = env
        self.callbacks: list[Callable[[Any], None]] | None = callbacks
        self._ok = value is not PENDING
        self._value: Any = value


def schedule(env: simpy.Environment, ev: object, delay: float) -> None:
    """`env.schedule(ev, NORMAL, delay)`: the same place in SimPy's queue (time, priority,
    the environment's next sequence number), for SimPy's events and `LoopEvent`s alike."""
    queue: list = env._queue  # SimPy types its entries as its own events
    heappush(queue, (env._now + delay, NORMAL, next(env._eid), ev))


def done_at(env: simpy.Environment, ev: LoopEvent, t: float) -> None:
    """Trigger the pending event `ev` (successfully, value None) at time `t` ≥ now."""
    ev._ok = True
    ev._value = None
    schedule(env, ev, t - env._now)


def call_after(env: simpy.Environment, delay: float, fn: Callable[[Any], None]) -> None:
    """Call `fn(event)` `delay` ns from now: the one event `env.timeout(delay)` with `fn`
    as its callback is, without a Timeout object."""
    schedule(env, LoopEvent(env, [fn], None), delay)


def pending(env: simpy.Environment) -> LoopEvent:
    """A pending event, for a service whose end a grant decides (`done_at` triggers it)."""
    return LoopEvent(env, [], PENDING)


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

