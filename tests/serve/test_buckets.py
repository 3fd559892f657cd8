"""The step memo's bucket rule."""

from __future__ import annotations

import itertools

from kernbench.host.serve.buckets import corners, edges
from kernbench.host.serve.steps import StepTimer


def test_edges_are_at_most_a_sixteenth_octave_apart():
    for x in range(1, 5000):
        lo, hi = edges(x)
        assert lo <= x <= hi
        if x <= 16:
            assert lo == hi == x
        elif lo != hi:
            assert (hi - lo) * 16 <= lo  # ≤ 6.25 % apart
            assert edges(lo) == (lo, lo) and edges(hi) == (hi, hi)


def test_corner_weights_interpolate_multilinear_costs_exactly():
    def f(shape):
        b, s, k = shape
        return 1000.0 + 7 * b + 3 * s + 0.5 * k + 0.25 * b * k + 2 * b * s

    for shape in itertools.product((1, 17, 45), (1, 100, 1500), (0, 33, 3000)):
        cs = corners(shape)
        assert abs(sum(w for _, w in cs) - 1) < 1e-12
        assert abs(sum(w * f(c) for c, w in cs) - f(shape)) < 1e-6


def test_memo_simulates_each_corner_once():
    calls = []

    def sim(shape):
        calls.append(shape)
        return 100.0 * shape[0] + shape[2]

    t = StepTimer(sim)
    for k in range(1024, 1088):
        t.program_ns((8, 1, k))
    assert len(calls) == len(set(calls)) == 2  # the edges 1024 and 1088 around 1024..1087
    exact = StepTimer(sim, exact=True)
    for k in range(1024, 1088):
        exact.program_ns((8, 1, k))
    assert len(calls) == 2 + 64
