"""A simulation frees each command's objects by reference counting as the command
retires. The cyclic collector is paused while a program runs (common.gc_pause), so a
reference cycle made per command would hold every command's objects until the run ends:
compiled nested functions that call each other make one (ADR-1320: M_CPU's packets were
such closures)."""

from __future__ import annotations

import gc

import onnx

from kernbench.host.flow import TIMING_ONLY, compile_model, simulate_bundle
from kernbench.models.builders import build_gpt2
from kernbench.topology import load_topology


def _cycles_after_run(tmp_path, n_layer: int) -> tuple[int, int]:
    """(entries of a GPT-2 of `n_layer` blocks on `small`, objects in reference cycles
    its simulation left)."""
    model = tmp_path / f"gpt2-{n_layer}.onnx"
    onnx.save(build_gpt2(n_layer=n_layer, seq=32), str(model))
    topo = load_topology("small")
    state, _ = compile_model(model, topo, tmp_path / f"bundle-{n_layer}")
    entries = len(state.cmdq.entries)
    del state
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        res = simulate_bundle(tmp_path / f"bundle-{n_layer}", topo, tmp_path / f"out-{n_layer}",
                              TIMING_ONLY)
        assert res.stats["total_ns"] > 0
        del res
        return entries, gc.collect()  # what only the collector frees: the run's cycles
    finally:
        if was:
            gc.enable()


def test_a_run_leaves_no_cycle_per_command(tmp_path):
    small_n, small_found = _cycles_after_run(tmp_path, 1)
    big_n, big_found = _cycles_after_run(tmp_path, 4)
    assert big_n - small_n > 500
    # the simulator's own wiring (components ↔ simulator) is the same on one topology, and
    # a decoder block's layers leave a few (fewer than one object per entry); a cycle per
    # command would be several objects more per entry
    assert big_found - small_found < big_n - small_n, (
        f"{big_found - small_found} more objects in cycles for {big_n - small_n} more entries")
