"""Worker processes a command spawns start with Python's collector thresholds and the C
library's heap settings; serve's step-program workers and a sweep's points set the
console script's (`common.tuning.tune_process`) before they compile or simulate."""

from __future__ import annotations

import gc

import pytest

from kernbench.common.gc_pause import GC_THRESHOLDS

DEFAULTS = (700, 10, 10)


@pytest.fixture
def restore_thresholds():
    was = gc.get_threshold()
    yield
    gc.set_threshold(*was)


def test_a_serve_worker_tunes_its_process(restore_thresholds, monkeypatch):
    import kernbench.errors
    from kernbench.host.serve import pool

    # the initializer also keeps each warning once for the worker's life: not for this
    # test process's later tests
    monkeypatch.setattr(kernbench.errors, "_GIVEN", None)
    gc.set_threshold(*DEFAULTS)
    pool._init(None, None)  # type: ignore[arg-type]  # what the pool runs in each worker
    try:
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        pool._WORKER = None


def test_a_sweep_point_tunes_its_process(restore_thresholds):
    from kernbench.host.sweep.points import Point
    from kernbench.host.sweep.runner import run_point

    gc.set_threshold(*DEFAULTS)
    point = Point(0, "p0", "gpt2", "gpt2", True, 16, None, 1, "default", None, (),
                  {"not": "a topology"}, None)
    outcome = run_point(point)
    assert outcome.status == "error"  # the point itself fails, after the tuning
    assert gc.get_threshold() == GC_THRESHOLDS


def test_benchmarks_find_the_tuning_where_they_look_for_it(restore_thresholds):
    import kernbench.cli as cli  # benchmarks/sim_speed.py, compile_trees.py, compile_phases.py
    from kernbench.common import heap

    gc.set_threshold(*DEFAULTS)
    cli.tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert cli.tune_heap is heap.tune_heap
