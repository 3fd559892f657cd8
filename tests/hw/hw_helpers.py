"""Helpers of the hardware-model tests (a module of its own name, so that tests of several
folders run in one pytest call never import another folder's conftest)."""

from __future__ import annotations

from kernbench.sim_engine.engine import Simulator


def spans_of(sim: Simulator, component_suffix: str, channel: str | None = None) -> list[tuple]:
    """Engine spans (component, channel, start, end, label, tile, stage) of one engine."""
    return [
        s for s in sim.tracer.spans
        if s[0].endswith(component_suffix) and (channel is None or s[1] == channel)
    ]
