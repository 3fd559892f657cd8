"""Same-instant reservations are granted oldest command first, whatever the number of
zero-delay events each requester's chain took (ADR-0925)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simpy.core import EmptySchedule

from kernbench.components.environment import GrantingEnvironment
from kernbench.components.fabric import Server, transfer


def _race(hops: list[int], keys: list[int], stepwise: bool = False) -> list[tuple[int, float]]:
    """Requesters i = 0..n-1 each take hops[i] zero-delay events, then ask the arbiter to
    reserve one shared server for 64 bytes under key keys[i]; (key, end) in grant order.
    `stepwise`: `env.step()` until the schedule is empty instead of `env.run()`."""
    env = GrantingEnvironment()
    arb = env.arbiter
    link = Server("l", 1.0, 8.0)
    log: list[tuple[int, float]] = []

    def reserve(key: int) -> None:
        log.append((key, transfer(env.now, 64, (link,))))

    def requester(i: int):  # noqa: ANN202
        yield env.timeout(5)
        for _ in range(hops[i]):
            yield env.timeout(0)
        arb.request((keys[i], 0, 0), reserve, keys[i])

    for i in range(len(hops)):
        env.process(requester(i))
    if not stepwise:
        env.run()
        return log
    with pytest.raises(EmptySchedule):
        while True:
            env.step()
    return log


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=6), st.randoms(use_true_random=False))
def test_grant_order_is_key_order_whatever_the_event_count(hops, rnd):
    keys = list(range(len(hops)))
    rnd.shuffle(keys)
    log = _race(hops, keys)
    # every request met in one grant: served in key order, back to back from t = 5
    assert [k for k, _ in log] == sorted(keys)
    assert [e for _, e in log] == [5 + 8 * (i + 1) + 1 for i in range(len(keys))]
    # the same race with every chain one event longer or shorter gives the same result
    assert _race([h + 1 for h in hops], keys) == log
    # and one step at a time (a grant or an event each) gives what run gives
    assert _race(hops, keys, stepwise=True) == log


def test_a_request_made_after_a_grant_of_the_same_instant_meets_the_next_grant():
    env = GrantingEnvironment()
    arb = env.arbiter
    order: list[str] = []

    def second() -> None:
        order.append("late")

    def first() -> None:
        order.append("old")
        arb.request((0, 0, 0), second)  # causally after the first grant: its own grant

    arb.request((9, 0, 0), lambda: order.append("young"))
    arb.request((1, 0, 0), first)
    env.run()
    assert order == ["old", "young", "late"]
    assert arb.grants == 2 and env.now == 0
