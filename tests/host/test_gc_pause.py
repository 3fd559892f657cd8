"""`gc_paused`: the collector is off inside, as it was after (nested, already off, after an
exception), a compile and a simulation leave it as they found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from kernbench.common.gc_pause import gc_paused
from kernbench.host.flow import compile_model
from kernbench.topology import load_topology

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture
def restore_gc():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


def test_off_inside_restored_after_nested_and_after_an_error(restore_gc):
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it off
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off(restore_gc):
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_compile_leaves_the_collector_on(restore_gc, tmp_path):
    gc.enable()
    compile_model(MODELS / "gpt2.onnx", load_topology("small"), tmp_path / "b")
    assert gc.isenabled()


def test_what_the_block_keeps_goes_to_the_oldest_generation_unscanned(restore_gc):
    gc.enable()
    gc.collect()
    with gc_paused():
        kept = [[i] for i in range(5000)]  # tracked containers, alive after the block
        cycle: list = []
        cycle.append(cycle)  # garbage the collector alone frees
        probe = gc.callbacks.append
    del cycle
    runs: list[int] = []
    probe(lambda phase, info: runs.append(info["generation"]) if phase == "start" else None)
    try:
        assert gc.get_count()[0] < 50  # the young generation does not hold them
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(x) in oldest for x in kept[::500])
        assert gc.collect() >= 1  # a full collection still frees the cycle
        assert runs == [2]
    finally:
        gc.callbacks.pop()


def test_objects_someone_froze_stay_frozen(restore_gc):
    gc.enable()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            _ = [[i] for i in range(100)]
        assert gc.get_freeze_count() == frozen  # not released by the block
    finally:
        gc.unfreeze()


def test_a_simulation_runs_with_the_collector_paused_and_leaves_it_on(restore_gc):
    from kernbench.sim_engine.engine import Simulator

    gc.enable()
    sim = Simulator(load_topology("small"))
    seen: list[bool] = []
    sim.env.timeout(1).callbacks.append(lambda _e: seen.append(gc.isenabled()))
    sim.run()
    assert seen == [False]  # the event ran inside the paused block
    assert gc.isenabled()
