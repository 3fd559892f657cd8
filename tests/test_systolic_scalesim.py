"""The systolic GEMM cycle model must reproduce SCALE-Sim 3.0.0 exactly.

Reference numbers come from ``tests/data/scalesim_gemm.json``, produced by
``scripts/scalesim_reference.py`` in a separate venv with ``scalesim==3.0.0`` installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.components.builtin.systolic import (
    compute_utilization,
    cycles_per_fold,
    mapping_efficiency,
    systolic_compute_cycles,
    systolic_folds,
    systolic_mapping,
)

_DATA = Path(__file__).parent / "data" / "scalesim_gemm.json"
_REF = json.loads(_DATA.read_text())
_CASES = _REF["cases"]


def _case_id(c: dict) -> str:
    return f"{c['dataflow']}-m{c['m']}n{c['n']}k{c['k']}-{c['rows']}x{c['cols']}"


def _args(c: dict) -> tuple[int, int, int, int, int, str]:
    return c["m"], c["n"], c["k"], c["rows"], c["cols"], c["dataflow"]


def test_reference_file_is_scalesim_3_0_0_and_covers_the_space() -> None:
    assert _REF["scalesim_version"] == "3.0.0"
    assert len(_CASES) >= 15
    assert {c["dataflow"] for c in _CASES} == {"ws", "os", "is"}
    assert any(c["rows"] != c["cols"] for c in _CASES)
    assert any(c["k"] < c["rows"] for c in _CASES)
    assert any(c["k"] > c["rows"] for c in _CASES)
    assert any(c["m"] % c["rows"] or c["n"] % c["cols"] for c in _CASES)
    # compute_cycles equals the model only without memory stalls; the reference must have none.
    assert all(c["stall_cycles"] == 0 for c in _CASES)


@pytest.mark.parametrize("case", _CASES, ids=_case_id)
def test_compute_cycles_match_scalesim(case: dict) -> None:
    assert systolic_compute_cycles(*_args(case)) == case["compute_cycles"]


@pytest.mark.parametrize("case", _CASES, ids=_case_id)
def test_mapping_and_compute_util_match_scalesim(case: dict) -> None:
    args = _args(case)
    assert 100.0 * mapping_efficiency(*args) == pytest.approx(case["mapping_efficiency"])
    assert 100.0 * compute_utilization(*args) == pytest.approx(case["compute_util"])


def test_single_fold_closed_form() -> None:
    # 4x4x4 on 4x4, weight stationary: one fold of 4 (weight load) + 4 (fill) + 4 (drain)
    # + 4 (stream m) - 2 cycles, and SCALE-Sim counts from cycle 0.
    assert systolic_folds(4, 4, 4, 4, 4, "ws") == (1, 1)
    assert systolic_compute_cycles(4, 4, 4, 4, 4, "ws") == (2 * 4 + 4 + 4 - 2) - 1 == 13
    # Output stationary has no load phase: rows + cols + k - 2 - 1.
    assert systolic_compute_cycles(8, 8, 8, 8, 8, "os") == (8 + 8 + 8 - 2) - 1 == 21
    assert mapping_efficiency(8, 8, 8, 8, 8, "os") == 1.0


def test_multi_fold_closed_form() -> None:
    # WS: Sr = k = 20 -> ceil(20/8) = 3 row folds, Sc = n = 10 -> ceil(10/4) = 3 col folds,
    # T = m = 5; each fold is 2*8 + 4 + 5 - 2 = 23 cycles.
    m, n, k, rows, cols = 5, 10, 20, 8, 4
    assert systolic_mapping(m, n, k, "ws") == (k, n, m)
    assert systolic_folds(m, n, k, rows, cols, "ws") == (3, 3)
    assert cycles_per_fold(m, n, k, rows, cols, "ws") == 23
    assert systolic_compute_cycles(m, n, k, rows, cols, "ws") == 9 * 23 - 1
    # IS maps (k, m, n) -> folds (3, 2), T = n = 10: 6 * (16 + 4 + 10 - 2) - 1.
    assert systolic_mapping(m, n, k, "is") == (k, m, n)
    assert systolic_compute_cycles(m, n, k, rows, cols, "is") == 6 * 28 - 1
    # OS maps (m, n, k) -> folds (1, 3), T = k = 20: 3 * (8 + 4 + 20 - 2) - 1.
    assert systolic_mapping(m, n, k, "os") == (m, n, k)
    assert systolic_compute_cycles(m, n, k, rows, cols, "os") == 3 * 30 - 1
    # Used PEs: 20 * 10 of 3 * 8 * 3 * 4 slots.
    assert mapping_efficiency(m, n, k, rows, cols, "ws") == pytest.approx(200 / 288)


@pytest.mark.parametrize(
    "bad",
    [(0, 1, 1, 4, 4, "ws"), (1, 1, 1, 4, -1, "os"), (1, 1, 1, 4, 4, "rs"), (1.5, 1, 1, 4, 4, "is")],
)
def test_rejects_bad_arguments(bad: tuple) -> None:
    with pytest.raises(ValueError):
        systolic_compute_cycles(*bad)
