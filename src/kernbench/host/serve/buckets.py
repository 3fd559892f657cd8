"""The step memo's bucket rule: which simulated programs stand for a program shape.

A program is (batch, new tokens, past tokens). Each of the three numbers is bucketed the
same way: up to 16 it is exact; above, between 2^n and 2^(n+1) the edges are 2^n / 16
apart (16, 17, …, 32, 34, …, 64, 68, …, 128, 136, …: at most 6.25 % apart, 16 edges an
octave; the edges of coarser rules of this form are among them, so a step cache filled
under one stays valid). A value on an edge is exact; a value between two edges is interpolated linearly
between the programs simulated at both edges, so a shape's time comes from up to 2³
simulated corners, which neighbouring shapes share.
"""

from __future__ import annotations

EXACT_BELOW = 16
PER_OCTAVE = 16


def edges(x: int) -> tuple[int, int]:
    """(lo, hi) edges around x (lo == hi == x when x is exact or on an edge)."""
    if x <= EXACT_BELOW:
        return x, x
    width = (1 << (x.bit_length() - 1)) // PER_OCTAVE
    lo = x // width * width
    return (x, x) if lo == x else (lo, lo + width)


def corners(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], float]]:
    """The simulated shapes that stand for `shape`, with their interpolation weights
    (summing to 1), in a fixed order."""
    out: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for x in shape:
        lo, hi = edges(x)
        if lo == hi:
            out = [((*c, x), w) for c, w in out]
        else:
            f = (x - lo) / (hi - lo)
            out = [(c2, w2) for c, w in out
                   for c2, w2 in (((*c, lo), w * (1 - f)), ((*c, hi), w * f))]
    return out
