"""The step memo's bucket rule."""

from __future__ import annotations

import itertools

from kernbench.host.serve.buckets import LINEAR_TOL, edges, first_asked, interpolate
from kernbench.host.serve.state import Seq, Step
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import Request


def test_edges_are_at_most_a_sixteenth_octave_apart():
    for x in range(1, 5000):
        lo, hi = edges(x)
        assert lo <= x <= hi
        if x <= 16:
            assert lo == hi == x
        elif lo != hi:
            assert (hi - lo) * 16 <= lo  # ≤ 6.25 % apart
            assert edges(lo) == (lo, lo) and edges(hi) == (hi, hi)


def test_multilinear_costs_interpolate_exactly_from_the_edges():
    def f(shape):
        b, s, k = shape
        return 1000.0 + 7 * b + 3 * s + 0.5 * k + 0.25 * b * k + 2 * b * s

    for shape in itertools.product((1, 17, 45), (1, 100, 1500), (0, 33, 3000)):
        asked: list[tuple[int, ...]] = []
        value = interpolate(shape, lambda c, asked=asked: asked.append(c) or f(c))
        assert abs(value - f(shape)) < 1e-6
        # only edges and their midpoints are simulated, never the shape between them
        for c in asked:
            assert all(edges(x) == (x, x) or x == sum(edges(x)) // 2 for x in c), c


def test_memo_simulates_each_corner_once():
    calls = []

    def sim(shape):
        calls.append(shape)
        return 100.0 * shape[0] + shape[2]

    t = StepTimer(sim)
    for k in range(1024, 1088):
        t.program_ns((8, 1, k))
    # the edges 1024 and 1088 around 1024..1087, and the midpoint that shows it linear
    assert sorted(calls) == [(8, 1, 1024), (8, 1, 1056), (8, 1, 1088)]
    exact = StepTimer(sim, exact=True)
    for k in range(1024, 1088):
        exact.program_ns((8, 1, k))
    assert len(calls) == 3 + 64  # its own memo: every shape once


def test_a_step_between_edges_is_found_and_every_shape_is_exact():
    # A tile boundary at k = 1061: the time jumps by 2 %, the rest is linear.
    def f(shape):
        return 50_000.0 + 3.0 * shape[2] + (1_000.0 if shape[2] >= 1061 else 0.0)

    calls = []

    def sim(shape):
        calls.append(shape)
        return f(shape)

    t = StepTimer(sim)
    for k in range(1024, 1089):
        assert t.program_ns((4, 1, k)) == round(f((4, 1, k)))
    assert len(set(calls)) == len(calls) <= 16  # bisection, not all 65 shapes


def test_a_step_below_the_tolerance_is_interpolated_over():
    def f(shape):
        return 1e6 + (0.5 * LINEAR_TOL * 1e6 if shape[0] >= 41 else 0.0)

    assert interpolate((41,), f) != f((41,))  # within the tolerance: the chord is used
    assert abs(interpolate((41,), f) - f((41,))) <= LINEAR_TOL * f((41,))


def test_refinement_is_independent_of_query_order():
    def f(shape):
        b, s, k = shape
        return 1e4 + 40 * b * s + (500.0 if s >= 150 else 0.0) + (900.0 if k % 64 > 40 else 0.0)

    shapes = list(itertools.product((3, 21), (131, 149, 150, 170), (1030, 1200, 3000)))
    a, b = StepTimer(f), StepTimer(f)
    va = [a.program_ns(s) for s in shapes]
    vb = [b.program_ns(s) for s in reversed(shapes)][::-1]
    assert va == vb


def test_first_asked_programs_are_asked_whatever_the_times():
    # a smooth cost and one with steps everywhere: interpolate asks for every program
    # first_asked lists (so simulating them ahead changes nothing), and more only when
    # a midpoint is off the chord
    def smooth(shape):
        return 1e5 + 3.0 * shape[0] * shape[2] + 50.0 * shape[1]

    def steps(shape):
        return 1e5 + 3.0 * shape[0] * shape[2] + (4e3 if shape[2] % 7 < 3 else 0.0)

    for f in (smooth, steps):
        for shape in itertools.product((3, 21, 45), (1, 150), (7, 600, 1061)):
            asked: set[tuple[int, ...]] = set()
            interpolate(shape, lambda c, asked=asked, f=f: asked.add(c) or f(c))
            assert set(first_asked(shape)) <= asked, shape
            assert len(first_asked(shape)) == len(set(first_asked(shape)))


def test_prefetched_programs_give_the_same_times_and_programs():
    def f(shape):
        b, s, k = shape
        return 1e4 + 40 * b * s + (500.0 if s >= 150 else 0.0) + (900.0 if k % 64 > 40 else 0.0)

    batches: list[list[tuple[int, int, int]]] = []

    def many(shapes):
        batches.append(list(shapes))
        return [(f(s), 0.0) for s in shapes]

    def step(prompt, computed):  # one decode sequence and one prefill chunk
        d = Seq(Request(0, 0, prompt, 8))
        d.computed = computed
        p = Seq(Request(1, 0, prompt, 8))
        return Step(decode=[d], prefill=[(p, prompt)])

    plain, ahead = StepTimer(f), StepTimer(f, simulate_many=many)
    for prompt, computed in ((131, 1030), (149, 1200), (170, 3000), (150, 1031)):
        assert plain.ns(step(prompt, computed)) == ahead.ns(step(prompt, computed))
    assert plain.programs == ahead.programs
    assert batches and all(len(b) >= 2 for b in batches)
