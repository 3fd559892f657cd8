"""`common.heap.tune_heap` (ADR-1110; `kernbench.cli` re-exports it): with glibc, arrays
freed and allocated again reuse the heap's memory instead of faulting fresh pages in; the
setting holds for the whole process, so each case is a fresh interpreter."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_PROBE = """
import resource, sys, numpy as np
if sys.argv[1] == "tuned":
    from kernbench.cli import tune_heap
    assert tune_heap()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(24 << 18, np.float32); del a
f0 = faults()
for _ in range(20):  # three 24 MB arrays at a time, then freed: 72 MB at the heap's top
    a = np.ones(24 << 18, np.float32); b = a + 1; c = b + 1; del a, b, c
print(faults() - f0)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                         text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_freed_memory_is_reused_without_faulting_pages_in_again():
    # glibc's defaults give part of the freed top of the heap back each round, and the
    # next round faults those pages in again (zeroed by the kernel); tuned, they stay
    default, tuned = _faults("default"), _faults("tuned")
    assert tuned * 5 < default, (tuned, default)


def test_tune_heap_takes_effect_exactly_on_glibc():
    """True where the C library is glibc (both thresholds taken), False elsewhere; it
    never raises."""
    from kernbench.cli import tune_heap

    assert tune_heap() is (platform.libc_ver()[0] == "glibc")
