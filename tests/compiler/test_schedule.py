"""Dependencies on HBM bytes: exact for strided tiles, conservative otherwise."""

from __future__ import annotations

import pytest

from kernbench.compiler.schedule import overlaps


@pytest.mark.parametrize(("a", "b", "expected"), [
    ((0, 100, 100, 100), (100, 200, 100, 100), False),       # contiguous, adjacent
    ((0, 100, 100, 100), (99, 200, 101, 101), True),         # contiguous, one byte shared
    # two column blocks of the same rows of a 256-byte-pitch matrix: disjoint
    ((0, 4 * 256 - 128, 256, 128), (128, 4 * 256, 256, 128), False),
    # the same columns, rows interleaved differently: shared
    ((0, 4 * 256 - 128, 256, 128), (64, 4 * 256 - 64, 256, 128), True),
    # column blocks of 384 bytes in a 3072-byte pitch, the storage at 256 bytes past a
    # multiple of the pitch: one block straddles a multiple of the pitch, still disjoint
    ((256 + 2560, 256 + 2560 + 31 * 3072 + 384, 3072, 384),
     (256 + 2944, 256 + 2944 + 31 * 3072 + 384, 3072, 384), False),
    # ... and a block sharing 128 bytes of it: shared
    ((256 + 2560, 256 + 2560 + 31 * 3072 + 384, 3072, 384),
     (256 + 2816, 256 + 2816 + 31 * 3072 + 384, 3072, 384), True),
    # a contiguous range over the strided one: shared
    ((0, 4 * 256 - 128, 256, 128), (300, 310, 10, 10), True),
    # a contiguous range in the gap between two rows of a strided one: conservative
    ((0, 4 * 256 - 128, 256, 128), (130, 250, 120, 120), True),
])
def test_overlaps(a, b, expected):
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected
