"""`RunOptions.check_compiled` False (a serving run's step programs): the program the run
compiled a moment ago is simulated without validating it again against the topology's
limits, with the same stats; a program read from a file is validated whatever the
option says."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernbench.host.simulate as simulate_mod
from kernbench.host.flow import CompileRequest, SimOptions, compile_model, simulate_bundle
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

CONFIGS = Path(__file__).resolve().parents[1] / "hf_configs"


@pytest.fixture
def checks(monkeypatch):
    """The programs simulate_program validates, counted (the real check still runs)."""
    seen: list[int] = []
    real = simulate_mod.check_program

    def counting(program, limits, file=None):
        seen.append(len(program.cmdq))
        real(program, limits, file)

    monkeypatch.setattr(simulate_mod, "check_program", counting)
    return seen


def _run(tmp: Path, check: bool):
    topo = load_topology("small")
    res = resolve_model(CONFIGS / "tiny-llama-4l.json", ShapeOptions(2, 1, 40), tmp / "m", None)
    opts = RunOptions(trace=False, report=False, write_cmdq=False, write_weights=False,
                      bundle=tmp / "bundle", check_compiled=check)
    return run_model(res.path, topo, tmp / "out", opts, RunHooks(note=lambda *_: None)).stats


def test_a_trusted_compiled_program_is_not_validated_again_and_times_the_same(tmp_path,
                                                                               checks):
    checked = _run(tmp_path / "a", True)
    assert len(checks) == 1 and checks[0] > 1
    trusted = _run(tmp_path / "b", False)
    assert len(checks) == 1
    assert trusted == checked


def test_a_program_read_from_a_file_is_validated_whatever_the_option(tmp_path, checks):
    topo = load_topology("small")
    res = resolve_model(CONFIGS / "tiny-llama.json", ShapeOptions(1, 1, 8), tmp_path / "m",
                        None)
    compile_model(res.path, topo, tmp_path / "bundle", CompileRequest(write_weights=False))
    simulate_bundle(tmp_path / "bundle", topo, tmp_path / "out",
                    SimOptions(trace=False, report=False, check_prog=False))
    assert len(checks) == 1
