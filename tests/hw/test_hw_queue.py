"""HwQueue behaves event for event like simpy.Store: random producers and consumers with
tied delays see the same completions in the same order at the same times."""

from __future__ import annotations

import random

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.components.queues import HwQueue


def _log(queue_cls: type, seed: int, capacity: int, producers: int, consumers: int) -> list:
    rng = random.Random(seed)
    env = simpy.Environment()
    q = queue_cls(env, capacity=capacity) if capacity else queue_cls(env)
    log: list = []
    plans = [[rng.choice([0, 0, 1, 2]) for _ in range(rng.randint(1, 12))]
             for _ in range(producers)]
    waits = [[rng.choice([0, 0, 1, 3]) for _ in range(40)] for _ in range(consumers)]

    def producer(p: int):  # noqa: ANN202
        for i, d in enumerate(plans[p]):
            if d:
                yield env.timeout(d)
            if rng.random() < 0.7:
                yield q.put((p, i))  # waits until the item is in the queue
            else:
                q.put((p, i))  # fire and forget (as M_CPU's delivery does)
            log.append((env.now, "put", p, i, len(q.items), len(q.put_queue)))

    def consumer(c: int):  # noqa: ANN202
        for d in waits[c]:
            item = yield q.get()
            log.append((env.now, "got", c, item, len(q.items), len(q.get_queue)))
            if d:
                yield env.timeout(d)

    for p in range(producers):
        env.process(producer(p))
    for c in range(consumers):
        env.process(consumer(c))
    env.run(until=200)
    log.append(("end", env.now, len(q.items), len(q.put_queue), len(q.get_queue),
                repr(env._eid)))
    return log


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0, 1, 2, 4]), st.integers(1, 4),
       st.integers(1, 3))
def test_hw_queue_is_event_for_event_a_simpy_store(seed, capacity, producers, consumers):
    want = _log(simpy.Store, seed, capacity, producers, consumers)
    got = _log(HwQueue, seed, capacity, producers, consumers)
    assert got == want
    assert any(e[1] == "got" for e in want[:-1])



def _consumed(waiting: bool, seed: int, capacity: int, producers: int) -> list:
    """(time, item) as one consumer receives them: waiting on `get` events, or with
    `HwQueue.wait` (its consumption delays drawn from the same seed either way)."""
    rng = random.Random(seed)
    env = simpy.Environment()
    q = HwQueue(env, capacity=capacity) if capacity else HwQueue(env)
    got: list = []
    plans = [[rng.choice([0, 0, 1, 2]) for _ in range(rng.randint(1, 12))]
             for _ in range(producers)]
    delays = iter([rng.choice([0, 0, 1, 3]) for _ in range(200)])

    def producer(p: int):  # noqa: ANN202
        for i, d in enumerate(plans[p]):
            if d:
                yield env.timeout(d)
            ev = q.offer((p, i))
            if ev is not None:
                yield ev

    def consumer():  # noqa: ANN202
        while True:
            item = yield q.get()
            got.append((env.now, item))
            d = next(delays)
            if d:
                yield env.timeout(d)

    def take(item: object = None) -> None:  # the state-machine consumer
        if item is not None:
            got.append((env.now, item))
            d = next(delays)
            if d:
                env.timeout(d).callbacks.append(lambda _e: take())
                return
        nxt = q.take()
        if nxt is None:
            q.wait(take)
        else:
            take(nxt)

    for p in range(producers):
        env.process(producer(p))
    if waiting:
        take()
    else:
        env.process(consumer())
    env.run(until=200)
    return got


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0, 1, 2, 4]))
def test_wait_hands_over_what_a_get_would_at_the_same_times(seed, capacity):
    """With one producer, a consumer that waits with `wait` receives the same items in the
    same order at the same simulated times as one that waits on `get` events."""
    want = _consumed(False, seed, capacity, 1)
    assert _consumed(True, seed, capacity, 1) == want
    assert want


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0, 1, 2, 4]), st.integers(2, 4))
def test_wait_with_several_producers_keeps_each_producers_order(seed, capacity, producers):
    """Several producers: every item a get-waiting consumer receives is received once, and
    each producer's items in its own order. Same-instant arrivals of different producers
    may be admitted in another order (and so later items at other times): ADR-1010 says
    why the simulator's outputs are checked, not assumed, to be unchanged."""
    want = _consumed(False, seed, capacity, producers)
    got = _consumed(True, seed, capacity, producers)
    items = [item for _t, item in got]
    assert len(set(items)) == len(items)
    assert sorted(items) == sorted(item for _t, item in want)
    for p in range(producers):
        mine = [i for q, i in items if q == p]
        assert mine == sorted(mine)
