"""A kernbench process's collector and heap settings (`tune_process`), for every process
that compiles or simulates: the console script, and the worker processes a command
spawns, which start as fresh interpreters with Python's and the C library's defaults
(serve's step programs, a sweep's points, Ray tasks). Neither setting changes a result,
only how fast memory is scanned and reused."""

from __future__ import annotations

from kernbench.common.gc_pause import tune_gc
from kernbench.common.heap import tune_heap

__all__ = ["tune_process"]


def tune_process() -> None:
    """`tune_gc` and `tune_heap`: idempotent, so a worker may call it for every task."""
    tune_gc()
    tune_heap()
