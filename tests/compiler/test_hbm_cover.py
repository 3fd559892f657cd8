"""What the schedule may forget (compiler.hbm_cover, ADR-0713): an HBM access goes only
when later writes hold every one of its bytes, checked here against byte sets."""

from __future__ import annotations

import random

import pytest

from kernbench.compiler.hbm_cover import Access, covers, minus
from kernbench.compiler.schedule import Scheduler, overlaps
from kernbench.compiler.tilegraph import TileOp


def _bytes(rng: tuple) -> set[int]:
    lo, hi, st, rb = rng
    if rb >= st or hi - lo <= rb:
        return set(range(lo, hi))
    out: set[int] = set()
    a = lo
    while a < hi:
        out.update(range(a, min(a + rb, hi)))
        a += st
    return out


def _rand_range(r: random.Random) -> tuple:
    pitch = r.choice([256, 512, 768])
    if r.random() < 0.4:  # contiguous
        lo = r.randrange(0, 4096)
        n = r.randrange(1, 2048)
        return (lo, lo + n, n, n)
    rb = r.randrange(1, pitch)
    rows = r.randrange(2, 8)
    lo = r.randrange(0, 2048)
    return (lo, lo + (rows - 1) * pitch + rb, pitch, rb)


def test_cover_never_forgets_a_byte_still_unwritten():
    """Random accesses and writes of several pitches: `cover` says "all gone" only when
    the writes' bytes include every byte of the access, and for contiguous or one-pitch
    geometry it does say so then."""
    r = random.Random(7)
    confirmed = 0
    for _ in range(3000):
        e = _rand_range(r)
        a = Access(e, 0)
        left = _bytes(e)
        done = False
        for _ in range(r.randrange(1, 6)):
            w = _rand_range(r) if r.random() < 0.5 else _cut(r, e)
            if not overlaps(w, e):
                continue
            left -= _bytes(w)
            done = a.cover(w)
            assert not done or not left, (e, w)
            if done:
                confirmed += 1
                break
    assert confirmed > 300  # exact enough to forget accesses, not only sound


def _cut(r: random.Random, e: tuple) -> tuple:
    """A write over part of `e`: its rows in row blocks, or a column block of its pitch."""
    lo, hi, st, rb = e
    if rb >= st or hi - lo <= rb:
        mid = r.randrange(lo, hi)
        return (lo, mid + 1, mid + 1 - lo, mid + 1 - lo) if r.random() < 0.5 else (mid, hi, hi - mid, hi - mid)
    c = r.randrange(0, rb)
    return (lo + c, hi, st, rb - c) if r.random() < 0.5 else (lo - c, hi, st, rb + c)


@pytest.mark.parametrize(("w", "e", "expected"), [
    ((0, 100, 100, 100), (10, 20, 10, 10), True),
    ((0, 100, 100, 100), (90, 110, 20, 20), False),
    # one column block of a 256-byte pitch over another, narrower one: covered
    ((0, 3 * 256 + 128, 256, 128), (32, 3 * 256 + 96, 256, 64), True),
    ((0, 3 * 256 + 128, 256, 128), (96, 3 * 256 + 160, 256, 64), False),
    ((0, 3 * 256 + 128, 256, 128), (300, 340, 40, 40), True),   # a run inside row 1
    ((0, 3 * 256 + 128, 256, 128), (100, 140, 40, 40), False),  # a run over a gap
])
def test_covers(w, e, expected):
    assert covers(w, e) is expected
    assert not expected or _bytes(e) <= _bytes(w)


def test_minus_splits_a_rectangle():
    assert minus((0, 4, 0, 8), (1, 3, 2, 6)) == [(0, 1, 0, 8), (3, 4, 0, 8), (1, 3, 0, 2),
                                                 (1, 3, 6, 8)]
    assert minus((0, 4, 0, 8), (5, 6, 0, 8)) == [(0, 4, 0, 8)]
    assert minus((0, 4, 0, 8), (0, 4, 0, 8)) == []


def test_scheduler_waits_through_the_covering_writes():
    """A column-block read of four rows; four row writes of the next tensor in the same
    storage cover it. The last write waits for the read; so does a later write over the
    read's bytes, through those writes, and the read is no longer kept."""
    def op(i, reads=(), writes=()):
        o = TileOp("DMA_STORE_TILE" if writes else "DMA_LOAD_TILE", 0, "l", {},
                   hbm_reads=list(reads), hbm_writes=list(writes))
        o.index = i
        return o

    read = ("k", 0, 3 * 512 + 128, 512, 128)
    ops = [op(0, reads=[read])] + [op(1 + r, writes=[("k", 512 * r, 512 * r + 512, 512, 512)])
                                   for r in range(4)]
    later = op(5, writes=[("k", 0, 64, 64, 64)])
    s = Scheduler()
    s.feed(ops + [later])
    assert [o.deps for o in ops[1:]] == [[0], [0], [0], [0]]
    assert later.deps == [1]  # the write of row 0, which waited for the read
    assert not s.hbm_reads["k"]
