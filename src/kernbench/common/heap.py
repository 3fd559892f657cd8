"""The C heap of a kernbench process keeps freed memory for the next allocation.

A compile or a simulation allocates and frees numpy arrays of a few hundred KB to tens of
MB over and over (the calibration run's activations, quantized weights, GEMM tiles). With
glibc's defaults an array above the mmap threshold gets pages of its own, and the free
space at the top of the heap goes back to the kernel past the trim threshold: each such
allocation then faults its pages in afresh, and the kernel zeroes them. `tune_heap`
raises both thresholds (`mallopt`), so freed memory is reused instead. Nothing computed
depends on where memory comes from; the cost is a higher resident size (memory freed
below the top of the heap stays with the process).

On a C library without `mallopt` (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_heap"]

#: allocations up to this many bytes come from the heap, not pages of their own (glibc's
#: largest accepted value on 64-bit)
MMAP_THRESHOLD = 32 << 20
#: free space at the top of the heap kept before it goes back to the kernel
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3


def tune_heap() -> bool:
    """Set `MMAP_THRESHOLD` and `TRIM_THRESHOLD` for the process (the console script,
    serve's and a sweep's worker processes do; benchmarks call it to match). True when
    the C library took both."""
    try:  # the process's own symbols: the C library it runs on, no library search
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) \
        and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
