"""The ring flow control fit's arithmetic (benchmarks/ring_flow_fit.py): the line through
each row's simulated times and the closed-form least-squares c, on made-up rows whose
answers are worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ring_flow_fit  # noqa: E402

AG, RS = ("all_gather", 8 << 20), ("reduce_scatter", 8 << 20)


def test_a_row_line_through_exactly_linear_times_is_that_line():
    evals = {c: {AG: 300.0 + 2.0 * c} for c in (30.0, 40.0, 50.0)}
    assert ring_flow_fit.row_lines([AG], evals) == {AG: pytest.approx((300.0, 2.0))}


def test_the_line_smooths_a_step_by_least_squares():
    # times 100, 121, 140 at c = 0, 10, 20 (means 10 and 361/3): slope
    # (−10 · −61/3 + 10 · 59/3) / (100 + 100) = 2.0 per ns, intercept 361/3 − 2 · 10
    evals = {0.0: {AG: 100.0}, 10.0: {AG: 121.0}, 20.0: {AG: 140.0}}
    a, b = ring_flow_fit.row_lines([AG], evals)[AG]
    assert b == pytest.approx(2.0) and a == pytest.approx(361 / 3 - 20)


def test_least_squares_c_hits_every_row_when_one_c_fits_them_all():
    m_ag, m_rs = ring_flow_fit.MEASURED_US[AG], ring_flow_fit.MEASURED_US[RS]
    # both lines reach their measured time at c = 42
    lines = {AG: (m_ag - 42 * 1.5, 1.5), RS: (m_rs - 42 * 3.0, 3.0)}
    assert ring_flow_fit.least_squares_c(lines) == pytest.approx(42.0)


def test_least_squares_c_weighs_two_disagreeing_rows_by_their_slopes():
    m_ag, m_rs = ring_flow_fit.MEASURED_US[AG], ring_flow_fit.MEASURED_US[RS]
    # error_i(c) = s_i (c − c_i) with s_i = b_i / m_i: minimum at Σ s_i² c_i / Σ s_i²
    lines = {AG: (m_ag - 30 * 2.0, 2.0), RS: (m_rs - 60 * 1.0, 1.0)}
    s_ag, s_rs = 2.0 / m_ag, 1.0 / m_rs
    want = (s_ag ** 2 * 30 + s_rs ** 2 * 60) / (s_ag ** 2 + s_rs ** 2)
    assert ring_flow_fit.least_squares_c(lines) == pytest.approx(want)
