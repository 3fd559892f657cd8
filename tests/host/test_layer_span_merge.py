"""`merge_interval` keeps a PE's busy intervals of a layer as a sorted disjoint union; its
append fast path (an interval that starts after the last one's start) must give the same
list as the general insert, whatever the order the intervals come in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.common.program import merge_interval

_iv = st.tuples(st.integers(0, 60), st.integers(0, 20)).map(
    lambda t: (float(t[0]) / 4, float(t[0] + t[1]) / 4))


def _union(ivs: list[tuple[float, float]]) -> list[list[float]]:
    """The union of closed intervals, merged where they touch (an independent reference:
    sort, then sweep)."""
    out: list[list[float]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(_iv, max_size=25), st.booleans())
def test_merge_equals_union(ivs: list[tuple[float, float]], in_order: bool) -> None:
    """Mostly in time order (the tally's case, the fast path) or in any order: the merged
    list is the sorted union of the intervals."""
    seq = sorted(ivs) if in_order else ivs
    got: list[list[float]] = []
    for s, e in seq:
        merge_interval(got, s, e)
    assert got == _union(ivs)


def test_touching_and_nested() -> None:
    got: list[list[float]] = []
    for s, e in [(0.0, 1.0), (1.0, 2.0), (1.5, 1.7), (3.0, 4.0), (0.5, 3.0)]:
        merge_interval(got, s, e)
    assert got == [[0.0, 4.0]]
