"""The step memo's bucket rule."""

from __future__ import annotations

import itertools

import pytest

from kernbench.host.serve.buckets import (
    LINEAR_TOL,
    TOLERANCE,
    edges,
    first_asked,
    interpolate,
    midpoint_chain,
)
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


@pytest.mark.parametrize("per_octave", [1, 2, 4, 8])
def test_coarser_edges_are_edges_of_the_rule(per_octave):
    # a grid measured against the rule (StepTimer's per_octave): its edges and first
    # midpoints are the rule's edges, so a step cache of the rule's programs holds them
    for x in range(1, 5000):
        lo, hi = edges(x, per_octave)
        assert lo <= x <= hi
        # exact exactly where the grid's edges would be less than 1 apart
        assert (lo == hi == x) == (x <= per_octave or x % ((1 << x.bit_length() - 1)
                                                          // per_octave) == 0)
        if lo != hi:
            assert (hi - lo) * per_octave <= lo
            assert edges(lo) == (lo, lo) and edges(hi) == (hi, hi)
            assert hi - lo < 2 or edges((lo + hi) // 2) == ((lo + hi) // 2,) * 2


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


@pytest.mark.parametrize("dim, jump", [(2, 0.025), (1, 0.012)])
def test_a_step_between_edges_is_found_and_every_shape_is_exact(dim, jump):
    # A tile boundary at 1061: the time jumps by `jump`, the rest is linear. Past tokens
    # (dim 2) find steps over twice their 1 % tolerance, new tokens over twice 0.5 %.
    def f(shape):
        return 50_000.0 + 3.0 * shape[dim] + (jump * 53_000 if shape[dim] >= 1061 else 0.0)

    calls = []

    def sim(shape):
        calls.append(shape)
        return f(shape)

    t = StepTimer(sim)
    for k in range(1024, 1089):
        shape = (4, k, 7) if dim == 1 else (4, 1, k)
        assert t.program_ns(shape) == round(f(shape))
    assert len(set(calls)) == len(calls) <= 16  # bisection, not all 65 shapes


def test_past_token_jitter_is_interpolated_over_but_not_in_new_tokens():
    # The simulated schedule's jitter: values 0.4 % either side of a linear trend (a
    # large model's decode step does so in past tokens), so a midpoint can lie 0.8 % off
    # its chord. The trend is steep enough (2.6 % from edge to edge) that the midpoint is
    # checked. Past tokens take it as linear from the edges and one midpoint; the same
    # jitter in new tokens, whose tolerance is half, is refined as if it were a step.
    def f(x):
        return 8e6 * (1 + 4e-4 * (x - 1024) + (0.004 if x % 3 == 0 else -0.004))

    past, new = [], []
    t_past = StepTimer(lambda c: past.append(c) or f(c[2]))
    t_new = StepTimer(lambda c: new.append(c) or f(c[1]))
    for x in range(1024, 1089):
        v = t_past.program_ns((32, 1, x))
        assert abs(v / f(x) - 1) <= 0.0085  # the chord runs through the jitter
        t_new.program_ns((1, x, 0))
    assert sorted(c[2] for c in past) == [1024, 1056, 1088]
    assert len(new) > len(past)


@pytest.mark.parametrize("dim", [1, 2])
def test_edges_that_agree_need_no_midpoint(dim):
    # Edges whose times differ by at most twice the number's tolerance are trusted without
    # a midpoint; a single step between them is then at most that large, which is also
    # the largest step the midpoint check lets pass (J/2 within the tolerance).
    tol = TOLERANCE[dim]
    for jump in (0.5 * tol, 1.9 * tol):
        def f(shape, jump=jump):
            return 1e6 * (1 + (jump if shape[dim] >= 1061 else 0.0))

        calls = []
        t = StepTimer(lambda c, calls=calls, f=f: calls.append(c) or f(c))
        for x in range(1024, 1089):
            shape = (4, x, 7) if dim == 1 else (4, 1, x)
            assert abs(t.program_ns(shape) / f(shape) - 1) <= jump  # within the step
        assert sorted(c[dim] for c in calls) == [1024, 1088]
        # the rule before (`agree` 0) checks the midpoint, on the chord or not
        old = []
        t0 = StepTimer(lambda c, old=old, f=f: old.append(c) or f(c), agree=0)
        t0.program_ns((4, 1061, 7) if dim == 1 else (4, 1, 1061))
        assert 1056 in [c[dim] for c in old]


def test_a_half_whose_edges_agree_is_not_refined_further():
    # a 3 % step at 1030 (past tokens): the first midpoint 1056 is off the chord, and the
    # half [1024, 1056] holding 1040 has edges 3 % apart, so its midpoint 1040 (the value
    # itself) is checked; the half [1056, 1088] is flat and asks nothing more for 1070
    def f(shape):
        return 1e6 * (1.03 if shape[2] >= 1030 else 1.0)

    calls = []
    t = StepTimer(lambda c: calls.append(c) or f(c))
    assert t.program_ns((4, 1, 1040)) == round(f((4, 1, 1040)))
    assert sorted(c[2] for c in calls) == [1024, 1040, 1056, 1088]
    calls.clear()
    assert t.program_ns((4, 1, 1070)) == round(f((4, 1, 1070)))
    assert calls == []


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


@pytest.mark.parametrize("rule", [None, (16, 16, 4)])
def test_first_asked_programs_are_asked_whatever_the_times(rule):
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
            interpolate(shape, lambda c, asked=asked, f=f: asked.add(c) or f(c),
                        per_octave=rule)
            assert set(first_asked(shape, rule)) <= asked, shape
            assert len(first_asked(shape, rule)) == len(set(first_asked(shape, rule)))


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


def test_a_timer_with_another_grid_asks_for_its_edges():
    calls = []

    def sim(shape):
        calls.append(shape)
        return 100.0 * shape[0] + shape[2]

    t = StepTimer(sim, per_octave=(16, 16, 4))
    for k in range(1024, 1280):
        t.program_ns((8, 1, k))
    # past tokens on a quarter octave: the edges 1024 and 1280 and the midpoint 1152
    assert sorted(calls) == [(8, 1, 1024), (8, 1, 1152), (8, 1, 1280)]
    assert t.program_ns((8, 1, 1100)) == 800 + 1100


def test_the_midpoint_chain_follows_the_half_that_holds_the_value():
    assert midpoint_chain(529, 512, 576) == [544, 528, 536, 532, 530, 529]
    assert midpoint_chain(544, 512, 576) == [544]
    assert midpoint_chain(513, 512, 514) == [513]
    assert midpoint_chain(600, 576, 577) == []  # adjacent edges: nothing to refine


def _jagged(shape):
    """Linear in batch and past tokens with a ±1 % zigzag on odd past tokens (what the
    simulator's decode steps do, docs/performance.md): refinements go deep."""
    b, s, k = shape
    base = 1e6 + 2e3 * b * s + 50.0 * k
    return base * (0.99 if k % 2 else 1.0) + (3e4 if k % 97 > 60 else 0.0)


def test_programs_simulated_ahead_change_no_time_and_no_program_asked():
    asked_plain: list[tuple[int, int, int]] = []

    def sim(shape):
        asked_plain.append(shape)
        return _jagged(shape)

    batches: list[list[tuple[int, int, int]]] = []

    def speculate(shapes, optional=0):
        batches.append(list(shapes))
        return [(_jagged(s), 1.0) for s in shapes]

    recorded: list[tuple[int, int, int]] = []
    plain = StepTimer(sim)
    ahead = StepTimer(sim, speculate=speculate, width=2,
                      record=lambda s, ns: recorded.append(s))
    asked_plain.clear()
    shapes = [(32, 1, k) for k in range(512, 700, 7)] + [(5, 1, k) for k in (900, 1333)]
    for shape in shapes:
        assert plain.program_ns(shape) == ahead.program_ns(shape)
    assert plain.programs == ahead.programs  # the same programs, the same times
    assert batches and all(len(b) == 2 for b in batches)  # the second worker was used
    # every program simulated ahead and then asked for was recorded, once; the rest were
    # not asked for and stay out of the programs (and of any cache)
    assert len(recorded) == len(set(recorded))
    ran_ahead = {s for b in batches for s in b}
    assert set(recorded) == ran_ahead - set(ahead.spare)
    assert not set(ahead.spare) & set(ahead.programs)
    assert ahead.spare_seconds == float(len(ahead.spare))
    # what ran in this process plus what ran ahead and was used is what the plain timer ran
    local = [s for s in ahead.programs if s not in ran_ahead]
    assert sorted(local + recorded) == sorted(plain.programs)


def test_a_warm_timer_simulates_nothing_ahead():
    # every program the rule asks is in the step cache: a second run simulates none of
    # them and none ahead of them (the deeper midpoints it would have speculated on are
    # not in the cache, since the first run never asked for them)
    cache: dict[tuple[int, int, int], float] = {}

    def speculate(shapes, optional=0):
        return [(_jagged(s), 1.0) for s in shapes]

    cold = StepTimer(_jagged, speculate=speculate, width=2,
                     record=lambda s, ns: cache.__setitem__(s, ns))
    shapes = [(32, 1, k) for k in range(512, 700, 7)]
    times = [cold.program_ns(s) for s in shapes]
    cache.update({s: t for s, t in cold.programs.items() if s not in cache})
    assert cold.spare  # the cold run did simulate midpoints it never needed

    def never(*_):
        raise AssertionError("a warm run simulated a program")

    warm = StepTimer(never, speculate=never, width=2, record=never, cached=cache.get)
    assert [warm.program_ns(s) for s in shapes] == times
    assert warm.programs == cold.programs and warm.sim_seconds == 0.0


def test_programs_the_cache_knows_are_never_simulated_ahead():
    # half the programs in the step cache: what the timer simulates ahead beside a needed
    # midpoint is always a program the cache does not hold, and the times are the same
    plain = StepTimer(_jagged)
    shapes = [(32, 1, k) for k in range(512, 700, 7)]
    times = [plain.program_ns(s) for s in shapes]
    cache = dict(sorted(plain.programs.items())[::2])
    batches: list[list[tuple[int, int, int]]] = []

    def speculate(batch, optional=0):
        batches.append(list(batch))
        return [(_jagged(s), 1.0) for s in batch]

    half = StepTimer(_jagged, speculate=speculate, width=2, cached=cache.get)
    assert [half.program_ns(s) for s in shapes] == times
    assert batches and not any(s in cache for b in batches for s in b)


def _decode_step(batch: int, past: int) -> Step:
    seqs = []
    for i in range(batch):
        q = Seq(Request(i, 0, past, 64))
        q.computed = past
        seqs.append(q)
    return Step(decode=seqs)


def _filling_timer(fails=lambda s: False):  # noqa: ANN001, ANN202
    """A two-worker timer whose pool calls are logged; `fails(shape)`: a program that
    raises (None when it was simulated ahead, as `ProgramPool.simulate_many` gives)."""
    calls: list[list[tuple[int, int, int]]] = []
    recorded: list[tuple[int, int, int]] = []

    def run(shapes, optional=0):
        calls.append(list(shapes))
        out = []
        for i, s in enumerate(shapes):
            if fails(s):
                assert i >= len(shapes) - optional, f"a program asked for failed: {s}"
                out.append(None)
            else:
                out.append((_jagged(s), 1.0))
        return out

    def many(shapes):
        out = run(shapes)
        recorded.extend(shapes)
        return out

    timer = StepTimer(_jagged, simulate_many=many, speculate=run, width=2, max_batch=9,
                      record=lambda s, ns: recorded.append(s))
    return timer, calls, recorded


_DECODE_WALK = [(b, 512 + 3 * i) for i, b in enumerate([1, 2, 3, 3, 4, 5, 4, 6, 7, 8, 9, 8])]


def test_idle_workers_are_filled_with_the_next_steps_programs():
    # decode steps whose batch grows and shrinks by one: a pool call that would leave a
    # worker idle also runs programs of the neighbouring batches, which later steps ask
    # for; the times and the programs used are those of a timer without a pool
    plain = StepTimer(_jagged)
    timer, calls, recorded = _filling_timer()
    for b, past in _DECODE_WALK:
        assert timer.ns(_decode_step(b, past)) == plain.ns(_decode_step(b, past))
    assert timer.programs == plain.programs
    assert sorted(recorded) == sorted(plain.programs)  # each used program recorded once
    assert all(len(c) % 2 == 0 for c in calls)  # no worker left idle
    assert timer.local_seconds == 0.0  # and nothing simulated in this process
    ran = {s for c in calls for s in c}
    assert ran - set(timer.programs) == set(timer.spare)  # the rest waits, unused
    filled_then_used = ran & set(timer.programs)
    assert len(filled_then_used) == len(timer.programs)
    assert not any(s[0] > 9 for s in ran)  # never beyond the policy's batch


def test_a_program_simulated_ahead_that_fails_is_dropped():
    plain = StepTimer(_jagged)
    timer, calls, _ = _filling_timer(fails=lambda s: s[0] == 4)
    for b, past in _DECODE_WALK[:3]:  # up to batch 3: batch 4 is never asked for
        assert timer.ns(_decode_step(b, past)) == plain.ns(_decode_step(b, past))
    assert any(s[0] == 4 for c in calls for s in c)  # it was tried, beside an asked one
    assert not any(s[0] == 4 for s in timer.spare) and timer.programs == plain.programs


def test_a_batch_held_at_its_limit_guesses_past_tokens_first():
    # a saturated server: every step decodes max_batch (9) sequences while their past
    # tokens grow. The first idle worker guesses one sequence fewer (a batch that never
    # comes); once that guess has gone unasked and the past-token guess has been asked,
    # idle workers go to the past tokens ahead first, and to a batch of 8 only when
    # nothing past the next edge is left to run. Times and programs used are unchanged.
    plain = StepTimer(_jagged)
    timer, calls, _ = _filling_timer()
    for past in range(512, 1100, 4):
        step = _decode_step(9, past)
        assert timer.ns(step) == plain.ns(step)
    assert timer.programs == plain.programs
    assert timer.guesses["more"] == [0, 0]  # a batch at its limit cannot grow
    fewer, never = timer.guesses["fewer"]
    assert never == 0 and fewer == sum(s[0] == 8 for c in calls for s in c)
    later, asked = timer.guesses["later"]
    assert asked >= later - 1  # every past-token guess asked for, but maybe the last
    assert later > 2 * fewer  # the right guess went first
    assert all(s[0] == 8 or s[2] > 1096 for s in timer.spare)
