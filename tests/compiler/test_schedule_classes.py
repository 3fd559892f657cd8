"""The schedule's HBM dependency search by column class finds exactly the accesses that
`schedule.overlaps`, the byte-level definition, says a range shares a byte with."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.compiler.hbm_cover import Access
from kernbench.compiler.schedule import Classes, _overlapping, overlaps


@st.composite
def ranges(draw):  # noqa: ANN001, ANN201
    """(first byte, hull end, row stride, row bytes): dense or strided, a few pitches."""
    lo = draw(st.integers(0, 4096))
    if draw(st.booleans()):
        n = draw(st.integers(1, 512))
        return (lo, lo + n, n, n)
    stride = draw(st.sampled_from([64, 96, 128, 256]))
    rb = draw(st.integers(1, stride - 1))
    rows = draw(st.integers(2, 8))
    return (lo, lo + (rows - 1) * stride + rb, stride, rb)


@settings(max_examples=300, deadline=None)
@given(st.lists(ranges(), min_size=1, max_size=30), ranges())
def test_class_search_matches_overlaps(kept, q):
    classes = Classes()
    for i, r in enumerate(kept):
        classes.add(Access(r, i))
    deps: set[int] = set()
    _overlapping(deps, q, classes)
    assert deps == {i for i, r in enumerate(kept) if overlaps(q, r)}


def _columns_meet(rng: tuple, cls: tuple | None) -> bool:
    """The rule `Classes.meeting` indexes, one class at a time."""
    if cls is None:
        return True
    lo, _, st, rb = rng
    cst, phase, crb = cls
    if st != cst or rb >= st:
        return True
    d = (phase - lo) % st
    return d < rb or d + crb > st


@settings(max_examples=300, deadline=None)
@given(st.lists(ranges(), min_size=1, max_size=40), st.lists(ranges(), max_size=10),
       ranges())
def test_meeting_is_the_column_rule(kept, gone, q):
    """After adds and drops, `meeting` finds exactly the classes the rule admits."""
    classes = Classes()
    for i, r in enumerate(kept + gone):
        classes.add(Access(r, i))
    for r in gone:
        cls = (r[2], r[0] % r[2], r[3]) if r[3] < r[2] else None
        if cls in classes:
            classes.drop(cls)
    assert sorted(classes.meeting(q), key=repr) == sorted(
        (c for c in classes if _columns_meet(q, c)), key=repr)
