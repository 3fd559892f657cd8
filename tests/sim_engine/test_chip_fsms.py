"""Every chip's command processor runs its own chip's entries of a multi-chip program
(ADR-1060): its own fetch order, issue window and issue latency, with dependencies
across chips resolved when the other chip's entry completes. Times are checked against
the M_CPU's closed form (one issue per `issue_latency_cycles`, window slots freed at
completion)."""

from __future__ import annotations

import pytest

from kernbench.cmdq.io import parse_program
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology

ISSUE_CYCLES = 500  # long enough that issue, not the loads, sets the pace


def _topo(*sets: str):
    return load_topology("small", ["system.chips=2",
                                   f"cube.m_cpu.issue_latency_cycles={ISSUE_CYCLES}", *sets])


def _issue_ns(topo) -> float:
    m = topo.config.cube.m_cpu
    return m.issue_latency_cycles / m.clock_ghz


def _load(i, pe, deps=(), n=1024):
    return {"opcode": "DMA_LOAD_TILE", "id": i, "pe": pe, "qbits": 8, "dram_addr": 4096 * i,
            "spm_bank": 0, "spm_offset": 0, "num_elements": n, "deps_before": list(deps)}


def _entries(prog, topo):
    return simulate_program(parse_program(prog), topo).stats()


def test_each_chip_issues_its_own_entries_back_to_back():
    """Eight independent loads, chips 0 and 1 alternating in program order (PEs 0-3 are
    chip 0's, 4-7 chip 1's): each chip issues its four one issue latency apart, and both
    chips start together; one FSM for both would have issued the eight one after another."""
    topo = _topo()
    iss = _issue_ns(topo)
    prog = {"cmdq": [_load(i, (i % 2) * 4 + i // 2) for i in range(8)]
            + [{"opcode": "END", "id": 8}]}
    stats = _entries(prog, topo)
    rows = stats["entries"]
    for chip in (0, 1):
        mine = [rows[str(i)]["issue_ns"] for i in range(chip, 8, 2)]
        assert mine == [iss * (k + 1) for k in range(4)], chip
    last = max(rows[str(i)]["end_ns"] for i in range(8))
    assert stats["total_ns"] == last
    assert last < 8 * iss, "the chips did not issue one after another"


def test_a_dependency_on_another_chip_waits_for_its_completion():
    """A load on chip 1 that depends on a load on chip 0 issues one issue latency after
    that load ends; chip 1's independent load behind it in program order is not held."""
    topo = _topo()
    iss = _issue_ns(topo)
    prog = {"cmdq": [_load(0, 0, n=65536), _load(1, 4, deps=[0]), _load(2, 5),
                     {"opcode": "END", "id": 3}]}
    rows = _entries(prog, topo)["entries"]
    assert rows["1"]["issue_ns"] == pytest.approx(rows["0"]["end_ns"] + iss)
    assert rows["2"]["issue_ns"] == pytest.approx(iss), "chip 1's ready entry went first"


def test_each_chip_has_its_own_issue_window():
    """Issue window 1 on each chip: a chip's second load issues when its first completes,
    whatever the other chip does."""
    topo = _topo("cube.m_cpu.issue_window=1")
    iss = _issue_ns(topo)
    prog = {"cmdq": [_load(0, 0, n=65536), _load(1, 1), _load(2, 4), _load(3, 5),
                     {"opcode": "END", "id": 4}]}
    rows = _entries(prog, topo)["entries"]
    assert rows["0"]["issue_ns"] == rows["2"]["issue_ns"] == pytest.approx(iss)
    assert rows["1"]["issue_ns"] == pytest.approx(rows["0"]["end_ns"] + iss)
    assert rows["3"]["issue_ns"] == pytest.approx(rows["2"]["end_ns"] + iss)


def test_a_barrier_holds_the_first_chip_only():
    """A BARRIER (no PE: the first chip's) waiting for a chip-1 load holds chip 0's later
    load until that load ends, not chip 1's."""
    topo = _topo()
    iss = _issue_ns(topo)
    prog = {"cmdq": [_load(0, 4, n=65536), {"opcode": "BARRIER", "id": 1, "wait_for": [0]},
                     _load(2, 0), _load(3, 5), {"opcode": "END", "id": 4}]}
    rows = _entries(prog, topo)["entries"]
    assert rows["2"]["issue_ns"] == pytest.approx(rows["0"]["end_ns"] + iss)
    assert rows["3"]["issue_ns"] == pytest.approx(2 * iss)


def test_a_program_on_one_chip_runs_as_on_a_single_chip():
    """A program whose entries are all on chip 0 is one FSM, as on the one-chip topology:
    the same entry times."""
    prog = {"cmdq": [_load(i, i % 4, deps=[i - 1] if i % 3 == 2 else []) for i in range(7)]
            + [{"opcode": "END", "id": 7}]}
    one = load_topology("small", [f"cube.m_cpu.issue_latency_cycles={ISSUE_CYCLES}"])
    assert _entries(prog, _topo())["entries"] == _entries(prog, one)["entries"]
