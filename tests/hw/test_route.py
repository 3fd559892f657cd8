"""fabric.Route: a fixed path's reservation equals `fabric.transfer` over the same stages,
reservation for reservation, among random other traffic (ADR-1011)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.components.fabric import InterleavedServer, Route, Server, transfer


def _servers(rng: random.Random, n: int) -> list[Server]:
    out = []
    for i in range(n):
        cls = InterleavedServer if rng.random() < 0.2 else Server
        out.append(cls(f"s{i}", rng.choice([0.0, 0.5, 1.0, 3.0]), rng.choice([8.0, 32.0, 64.0])))
    return out


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
    for s in servers:
        log.append((s.id, list(s._starts), list(s._ends), s.busy_ns, s.bytes, s.transfers))
    return log


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6))
def test_route_reserves_what_transfer_reserves(seed):
    assert _run(seed, True) == _run(seed, False)
