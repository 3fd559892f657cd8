"""`gc_paused`: the collector is off inside, as it was after (nested, already off, after an
exception), and a compile leaves it as it found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from kernbench.host.flow import compile_model
from kernbench.host.gc_pause import gc_paused
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
