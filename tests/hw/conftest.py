"""Helpers for hardware-model tests: build a simulator from a preset plus overrides."""

from __future__ import annotations

import pytest

from kernbench.sim_engine.engine import Simulator
from kernbench.topology import load_topology


@pytest.fixture
def make_sim():
    def make(preset: str = "small", *overrides: str, **kw) -> Simulator:
        return Simulator(load_topology(preset, list(overrides)), **kw)

    return make
