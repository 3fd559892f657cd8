"""fabric.Route: a fixed path's reservation equals `fabric.transfer` over the same stages,
reservation for reservation, among random other traffic (ADR-1011); `transfer` and
`occupy_parallel` reserve what each stage's own `occupy` reserves."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.components.fabric import InterleavedServer, Route, Server, occupy_parallel, transfer


def _servers(rng: random.Random, n: int) -> list[Server]:
    out = []
    for i in range(n):
        cls = InterleavedServer if rng.random() < 0.2 else Server
        out.append(cls(f"s{i}", rng.choice([0.0, 0.5, 1.0, 3.0]), rng.choice([8.0, 32.0, 64.0])))
    return out


def _state(servers: list[Server]) -> list:
    """Every server's reservations and counters, in order."""
    return [(s.id, list(s._starts), list(s._ends), s.busy_ns, s.bytes, s.transfers)
            for s in servers]


def _run(seed: int, use_route: bool) -> list:
    """Packets over one fixed path among random transfers on its servers: every end, then
    every server's reservations and counters."""
    rng = random.Random(seed)
    servers = _servers(rng, 6)
    path = [servers[i] for i in rng.sample(range(6), rng.randint(1, 6))]
    route = Route(path, 64)
    now = 0.0
    log = []
    for _ in range(60):
        now += rng.choice([0.0, 0.0, 1.0, 2.5, 7.0])
        if rng.random() < 0.5:
            log.append(route.reserve(now) if use_route else transfer(now, 64, path))
        else:
            other = rng.sample(servers, rng.randint(1, 3))
            start = now + rng.choice([0.0, 5.0, 40.0])  # some reserved into the future
            log.append(transfer(start, rng.choice([64, 256, 4096]), other, now))
    return log + _state(servers)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6))
def test_route_reserves_what_transfer_reserves(seed):
    assert _run(seed, True) == _run(seed, False)


def _occupy_chain(now: float, nbytes: int, stages: list, keep: float) -> float:
    """`transfer`'s cut-through chain with every stage asked through its own `occupy`
    (the reference for the inline reservation of plain servers)."""
    head = end = now
    lat = 0.0
    for s in stages:
        start, end = s.occupy(head, nbytes, end + lat, keep)
        lat = s.latency_ns
        head = start + lat
    return end + lat


def _traffic(seed: int, reserve) -> list:  # noqa: ANN001
    """Random transfers (some into the future, some after every reservation has ended)
    over random paths, reserved by `reserve(now, nbytes, path, keep)`: every end, then
    every server's reservations and counters."""
    rng = random.Random(seed)
    servers = _servers(rng, 5)
    now = 0.0
    log = []
    for _ in range(80):
        now += rng.choice([0.0, 0.0, 1.0, 2.5, 7.0, 300.0])
        path = rng.sample(servers, rng.randint(1, 4))
        start = now + rng.choice([0.0, 0.0, 5.0, 40.0])
        log.append(reserve(start, rng.choice([64, 256, 4096]), path, now))
    return log + _state(servers)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6))
def test_transfer_reserves_what_each_stage_occupy_reserves(seed):
    assert _traffic(seed, transfer) == _traffic(seed, _occupy_chain)


def _shares_run(seed: int, inline: bool) -> list:
    """An HBM-like access: shares of one transfer on several channels from one head time,
    among other reservations on those channels."""
    rng = random.Random(seed)
    channels = [Server(f"ch{i}", 0.0, rng.choice([8.0, 32.0])) for i in range(4)]
    now = 0.0
    log = []
    for _ in range(60):
        now += rng.choice([0.0, 1.0, 2.5, 7.0, 300.0])
        head = now + rng.choice([0.0, 0.0, 5.0, 40.0])
        shares = [(ch, rng.choice([32, 256, 1024])) for ch in rng.sample(channels, rng.randint(0, 4))]
        if inline:
            log.append(occupy_parallel(
                tuple((ch, b, b / ch.bw_gbs, ch._starts, ch._ends) for ch, b in shares),
                head, now))
        else:
            start, end = None, 0.0
            for ch, b in shares:
                s, e = ch.occupy(head, b, 0.0, now)
                start = s if start is None or s < start else start
                end = max(end, e)
            log.append((start, end))
    for ch in channels:
        log.append((list(ch._starts), list(ch._ends), ch.busy_ns, ch.bytes, ch.transfers))
    return log


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6))
def test_parallel_shares_reserve_what_each_channel_occupy_reserves(seed):
    assert _shares_run(seed, True) == _shares_run(seed, False)
