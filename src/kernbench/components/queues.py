"""HwQueue: a bounded FIFO between hardware blocks, a `simpy.Store`'s behaviour, lean.

Every command and tile crosses several queues (PE_CPU, SubmissionQueue, the feeder, each
engine's inbox), so their cost is the simulator's. HwQueue keeps `simpy.Store`'s behaviour
exactly: the same events are scheduled in the same order at the same times (a put or get
that can complete is triggered at once; a put's processing serves the oldest waiting get,
a get's processing admits the oldest waiting put), so a run is event-for-event the one a
`simpy.Store` gives. It only skips SimPy's generic resource machinery (bound event
classes, request-queue scans that stop after the first element anyway). `items`,
`put_queue`, `get_queue` and `capacity` are the Store's, for deadlock reports. It is not
a subclass of `simpy.Store` (a compiled class cannot extend an interpreted one); its
events are SimPy's, scheduled as `Environment.schedule` schedules them.

`offer` and `take` are the hardware's own put and get, with no event when they complete
at once: `offer` appends an item if there is room and nobody waits to put (returning None;
a waiting get is served now), else it is `put`; `take` hands over the oldest item if one
is there and nobody waits to get (a waiting put is admitted now), else it returns None and
the caller waits, on `get` or with `wait`. They move the same items at the same times as
`put` and `get`, minus the events that only said so. `wait(taker)` is the consumer's wait
without a get event: the arriving item is handed to `taker` at once, at the same instant
a get event would have delivered it (the simulator's engines, dispatcher and feeder wait
this way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import PENDING, Event

from kernbench.components.arbiter import schedule


class HwQueue:
    """A FIFO of `capacity` items (default unbounded) with Store semantics."""

    __slots__ = ("_env", "_capacity", "items", "put_queue", "get_queue", "_put_items",
                 "_taker")

    def __init__(self, env: simpy.Environment, capacity: float = float("inf")) -> None:
        if capacity <= 0:
            raise ValueError('"capacity" must be > 0.')  # simpy.Store's check
        self._env = env
        self._capacity = capacity
        self.items: list[Any] = []
        self.put_queue: list[Event] = []  # waiting puts, oldest first
        self._put_items: list[Any] = []  # the item of each waiting put
        self.get_queue: list[Event] = []
        self._taker: Callable[[Any], None] | None = None

    @property
    def capacity(self) -> float:
        return self._capacity

    def put(self, item: object) -> Event:
        """Request to append `item`; the event is triggered once it is in the queue."""
        env = self._env
        ev = Event.__new__(Event)
        ev.env = env
        ev.callbacks = [self._serve_get]
        ev._value = PENDING
        self.put_queue.append(ev)
        self._put_items.append(item)
        if len(self.items) < self._capacity:
            self._enter()
        return ev

    def _enter(self) -> None:
        """The oldest waiting put's item enters the queue; its event is triggered."""
        head = self.put_queue.pop(0)
        self.items.append(self._put_items.pop(0))
        head._ok = True
        head._value = None
        schedule(self._env, head, 0)

    def get(self) -> Event:
        """Request the oldest item; the event's value is the item."""
        env = self._env
        ev = Event.__new__(Event)
        ev.env = env
        ev.callbacks = [self._admit_put]
        ev._value = PENDING
        gq = self.get_queue
        gq.append(ev)
        if self.items:
            self._hand_over()
        return ev

    def _hand_over(self) -> None:
        """The oldest waiting get takes the oldest item; its event is triggered."""
        head = self.get_queue.pop(0)
        head._ok = True
        head._value = self.items.pop(0)
        schedule(self._env, head, 0)

    def _serve_get(self, _put: object) -> None:
        """A put was processed: the oldest waiting get (or the taker) takes the oldest
        item, if any."""
        taker = self._taker
        if taker is not None and self.items:
            self._taker = None
            taker(self.items.pop(0))
            return
        if self.get_queue and self.items:
            self._hand_over()

    def _admit_put(self, _get: object) -> None:
        """A get was processed: the oldest waiting put enters, if there is room."""
        if self.put_queue and len(self.items) < self._capacity:
            self._enter()

    def offer(self, item: object) -> Event | None:
        """Append `item` now if there is room (None), else `put(item)` (its event). A
        waiting taker (`wait`) is handed the item now."""
        if self.put_queue or len(self.items) >= self._capacity:
            return self.put(item)
        taker = self._taker
        if taker is not None:
            self._taker = None
            taker(item)
            return None
        self.items.append(item)
        if self.get_queue:
            self._hand_over()
        return None

    def wait(self, taker: Callable[[Any], None]) -> None:
        """The queue's one consumer waits: `taker(item)` is called with the next item, at
        the moment it arrives (within the `offer` that brings it, or the processing of the
        put event that admits it), instead of by a get event later in the same instant.
        Only while the queue is empty; one taker at a time; a waiting `get` and a taker
        are not mixed on one queue."""
        self._taker = taker

    def take(self) -> Any:  # noqa: ANN401 - whatever was put
        """The oldest item, now, if there is one and no get waits; else None (wait on
        `get`)."""
        items = self.items
        if not items or self.get_queue:
            return None
        item = items.pop(0)
        if self.put_queue:
            self._enter()
        return item
