"""HwQueue: a bounded FIFO between hardware blocks, a `simpy.Store` with a lean put / get.

Every command and tile crosses several queues (PE_CPU, SubmissionQueue, the feeder, each
engine's inbox), so their cost is the simulator's. HwQueue keeps `simpy.Store`'s behaviour
exactly: the same events are scheduled in the same order at the same times (a put or get
that can complete is triggered at once; a put's processing serves the oldest waiting get,
a get's processing admits the oldest waiting put), so a run is event-for-event the one a
`simpy.Store` gives. It only skips SimPy's generic resource machinery (bound event
classes, request-queue scans that stop after the first element anyway). `items`,
`put_queue`, `get_queue` and `capacity` are the Store's, for deadlock reports.

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


class _Put(Event):
    __slots__ = ("item",)


class HwQueue(simpy.Store):
    """A FIFO of `capacity` items (default unbounded) with Store semantics."""

    def __init__(self, env: simpy.Environment, capacity: float = float("inf")) -> None:
        super().__init__(env, capacity)
        self._on_put_done = self._serve_get
        self._on_get_done = self._admit_put
        self._taker: Any = None

    def put(self, item: object) -> Event:  # type: ignore[override]
        """Request to append `item`; the event is triggered once it is in the queue."""
        env = self._env
        ev = _Put.__new__(_Put)
        ev.env = env
        ev.item = item
        ev.callbacks = [self._on_put_done]
        ev._value = PENDING
        pq = self.put_queue
        pq.append(ev)
        head = pq[0]
        if len(self.items) < self._capacity:
            self.items.append(head.item)
            head._ok = True
            head._value = None
            env.schedule(head)
            del pq[0]
        return ev

    def get(self) -> Event:  # type: ignore[override]
        """Request the oldest item; the event's value is the item."""
        env = self._env
        ev = Event.__new__(Event)
        ev.env = env
        ev.callbacks = [self._on_get_done]
        ev._value = PENDING
        gq = self.get_queue
        gq.append(ev)
        items = self.items
        if items:
            head = gq[0]
            head._ok = True
            head._value = items.pop(0)
            env.schedule(head)
            del gq[0]
        return ev

    def _serve_get(self, _put: Event) -> None:
        """A put was processed: the oldest waiting get (or the taker) takes the oldest
        item, if any."""
        taker = self._taker
        if taker is not None and self.items:
            self._taker = None
            taker(self.items.pop(0))
            return
        gq = self.get_queue
        if gq and self.items:
            head = gq[0]
            head._ok = True
            head._value = self.items.pop(0)
            self._env.schedule(head)
            del gq[0]

    def _admit_put(self, _get: Event) -> None:
        """A get was processed: the oldest waiting put enters, if there is room."""
        pq = self.put_queue
        if pq and len(self.items) < self._capacity:
            head = pq[0]
            self.items.append(head.item)
            head._ok = True
            head._value = None
            self._env.schedule(head)
            del pq[0]

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
        gq = self.get_queue
        if gq:
            head = gq[0]
            head._ok = True
            head._value = self.items.pop(0)
            self._env.schedule(head)
            del gq[0]
        return None

    def wait(self, taker: Callable[[Any], None]) -> None:
        """The queue's one consumer waits: `taker(item)` is called with the next item, at
        the moment it arrives (within the `offer` that brings it, or the processing of the
        put event that admits it), instead of by a get event later in the same instant.
        Only while the queue is empty; one taker at a time; a waiting `get` and a taker
        are not mixed on one queue."""
        self._taker = taker

    def take(self) -> Any:
        """The oldest item, now, if there is one and no get waits; else None (wait on
        `get`)."""
        items = self.items
        if not items or self.get_queue:
            return None
        item = items.pop(0)
        pq = self.put_queue
        if pq:
            head = pq[0]
            items.append(head.item)
            head._ok = True
            head._value = None
            self._env.schedule(head)
            del pq[0]
        return item
