"""The step memo's bucket rule: which simulated programs stand for a program shape.

A program is (batch, new tokens, past tokens). Each of the three numbers is bucketed the
same way: up to 16 it is exact; above, between 2^n and 2^(n+1) the edges are 2^n / 16
apart (16, 17, …, 32, 34, …, 64, 68, …, 128, 136, …: at most 6.25 % apart, 16 edges an
octave; the edges of coarser rules of this form are among them, so a step cache filled
under one stays valid). A value on an edge is exact; a value between two edges is
interpolated linearly between the programs at both edges, one number after the other
(multilinear over up to 2³ corners, which neighbouring shapes share).

An interval is only trusted to be linear once its times say so: a program's time steps
where a dimension crosses a tile boundary, and a step of J between two edges puts the
midpoint J/2 off the chord. So when the edges' times differ by more than twice the
number's tolerance (`TOLERANCE`, relative to the smaller), the midpoint is simulated too;
when it lies more than the tolerance off the chord, the half that holds the value is
taken instead, down to adjacent integers (exact), each half checked the same way. Edges
that agree within twice the tolerance need no midpoint: a time that does not fall as the
number grows lies between them, within that much of the chord, and a single step there is
at most that large, which is also the largest step the midpoint check lets pass (J/2
within the tolerance). The decision depends only on the simulated times at lo, hi (and
mid), never on which shapes were asked before, so the rule is deterministic.

Past tokens get twice the tolerance of batch and new tokens: one more cached token moves
a decode step's time by far less than its simulated schedule's jitter (on a large model
the contention of transfers re-orders from one past-token count to the next;
docs/serving.md), so a half-percent check refines on that jitter down to single tokens
without getting closer to the times around them; a step of twice the tolerance is still
found.
"""

from __future__ import annotations

from collections.abc import Callable

EXACT_BELOW = 16
PER_OCTAVE = 16
LINEAR_TOL = 0.005
#: the midpoint check's relative tolerance per number: (batch, new tokens, past tokens);
#: numbers beyond the third (none in serve) take `LINEAR_TOL`
TOLERANCE = (LINEAR_TOL, LINEAR_TOL, 2 * LINEAR_TOL)
#: edges whose times differ by at most this many tolerances need no midpoint (0: every
#: interval checks its midpoint, the rule before; for measuring it)
AGREE = 2.0

Shape = tuple[int, ...]


def edges(x: int, per_octave: int = PER_OCTAVE) -> tuple[int, int]:
    """(lo, hi) edges around x (lo == hi == x when x is exact or on an edge); the edges
    are 2^n / `per_octave` apart between 2^n and 2^(n+1) (a power of two ≤ 16), so
    x is exact up to `per_octave` (at most `EXACT_BELOW`), where they are 1 apart."""
    if x <= min(EXACT_BELOW, per_octave):
        return x, x
    width = (1 << (x.bit_length() - 1)) // per_octave
    lo = x // width * width
    return (x, x) if lo == x else (lo, lo + width)


def edges_within(shape: Shape, dim: int, per_octave: tuple[int, ...] | None = None,
                 context: int | None = None) -> tuple[int, int]:
    """`edges` of `shape[dim]`, unless a program at its upper edge would see more positions
    than the model's `context` (new + past tokens, numbers 1 and 2 of a serve shape; the
    numbers after `dim` at their own values): then the value itself, exact. A shape within
    the context never rounds past it, so no program beyond the model's positions is
    asked for."""
    x = shape[dim]
    lo, hi = edges(x, per_octave[dim] if per_octave else PER_OCTAVE)
    if context is not None and dim in (1, 2) and lo != hi \
            and sum(shape[1:dim]) + hi + sum(shape[dim + 1:3]) > context:
        return x, x
    return lo, hi


def interpolate(shape: Shape, program: Callable[[Shape], float], dim: int = 0,
                per_octave: tuple[int, ...] | None = None,
                ahead: Callable[[list[Shape]], None] | None = None,
                tol: tuple[float, ...] = TOLERANCE, context: int | None = None,
                agree: float = AGREE) -> float:
    """`shape`'s time from simulated programs (`program(shape)` simulates one, memoized by
    the caller): exact on edges, else linear between the edges, refined by midpoints.
    `per_octave`: the edges an octave of each number (default `PER_OCTAVE` for all;
    another grid is for measuring the rule, benchmarks/serve_memo_error.py); `tol` the
    midpoint check's tolerance of each number (likewise).
    `ahead(programs)`, when given, is told before each midpoint of the last number is
    asked which programs the refinement would ask next, in order, if no midpoint from
    here on were on its chord (`midpoint_chain`); it must not change what `program`
    returns, so the time is the same with or without it. `context`: the model's positions,
    which no asked program exceeds (`edges_within`); `agree` how many tolerances apart
    the edges' times may be without a midpoint (`AGREE`)."""
    if dim == len(shape):
        return program(shape)
    x = shape[dim]

    def at(v: int) -> float:
        return interpolate((*shape[:dim], v, *shape[dim + 1:]), program, dim + 1,
                           per_octave, ahead, tol, context, agree)

    lo, hi = edges_within(shape, dim, per_octave, context)
    if lo == hi:
        return at(x)
    t_lo, t_hi = at(lo), at(hi)
    rel = tol[dim] if dim < len(tol) else LINEAR_TOL
    while hi - lo > 1 and abs(t_hi - t_lo) > agree * rel * min(abs(t_lo), abs(t_hi)):
        mid = (lo + hi) // 2
        if ahead is not None and dim == len(shape) - 1:
            ahead([(*shape[:dim], v) for v in midpoint_chain(x, lo, hi)])
        t_mid = at(mid)
        chord = t_lo + (t_hi - t_lo) * (mid - lo) / (hi - lo)
        if abs(t_mid - chord) <= rel * abs(t_mid):
            break
        if x == mid:
            return t_mid
        if x < mid:
            hi, t_hi = mid, t_mid
        else:
            lo, t_lo = mid, t_mid
    if x == lo:
        return t_lo
    if x == hi:
        return t_hi
    f = (x - lo) / (hi - lo)
    return t_lo * (1 - f) + t_hi * f


def midpoint_chain(x: int, lo: int, hi: int) -> list[int]:
    """The midpoints the refinement of `x` in [lo, hi] visits if none is on its chord:
    (lo + hi) // 2 first, then the midpoint of the half that holds x, down to adjacent
    edges or x itself."""
    out = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        out.append(mid)
        if x == mid:
            break
        lo, hi = (lo, mid) if x < mid else (mid, hi)
    return out


def first_asked(shape: Shape, per_octave: tuple[int, ...] | None = None,
                context: int | None = None) -> list[Shape]:
    """The programs `interpolate(shape, …)` asks for whatever their times, in a fixed
    order: per number the value itself (exact or on an edge), or the two edges around it
    (a midpoint depends on the edges' times); every combination of them. With a
    `context`, the combinations `interpolate` asks for: a number's edges depend on the
    edge taken by the numbers before it (`edges_within`)."""
    out: list[Shape] = []

    def walk(prefix: tuple[int, ...], d: int) -> None:
        if d == len(shape):
            out.append(prefix)
            return
        x = shape[d]
        lo, hi = edges_within((*prefix, *shape[d:]), d, per_octave, context)
        for v in (x,) if lo == hi else (lo, hi):
            walk((*prefix, v), d + 1)

    walk((), 0)
    return out
