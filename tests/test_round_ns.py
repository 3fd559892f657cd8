"""`round_ns` (stats.json's times, and the per-layer tally of a streamed run) is
`round(x, 3)` bit for bit: its fast path takes the whole number nearest x·1000 only where
x·1000's floating-point error cannot move it across a half."""

import math
import struct

from hypothesis import example, given
from hypothesis import strategies as st

from kernbench.common.program import round_ns


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def same(x: float) -> None:
    want = round(float(x), 3)
    got = round_ns(x)
    assert type(got) is float
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert bits(got) == bits(want), (x, got, want)


@given(st.floats(allow_nan=True, allow_infinity=True))
@example(0.0)
@example(-0.0)
@example(0.0625)    # x·1000 = 62.5 exactly: a tie, to even (0.062)
@example(0.0635)    # not exact in binary: x·1000 lies just off the half
@example(1.0005)
@example(2.0 ** 52)
@example(4503599627370.4995)
@example(5e-324)
def test_any_float(x: float) -> None:
    same(x)


@given(st.integers(0, 10 ** 12), st.sampled_from([1, 2, 8, 16, 125, 1000, 2000, 4000, 3]))
def test_decimal_times(k: int, d: int) -> None:
    """Times near the decimals the rounding decides between: k / d, and the doubles
    beside it."""
    x = k / d
    for y in (x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)):
        same(y)


@given(st.integers(0, 10 ** 9))
def test_halves(k: int) -> None:
    """(k + 0.5) / 1000 and its neighbours: the values where x·1000's error matters."""
    x = (k + 0.5) / 1000.0
    for y in (x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)):
        same(y)


def test_an_int_comes_back_a_float() -> None:
    assert bits(round_ns(0)) == bits(0.0)
    assert bits(round_ns(7)) == bits(7.0)
