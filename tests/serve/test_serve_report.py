"""The serving report reads on any model size: a small model in a large HBM fills a sliver
of its KV cache, and the card and the occupancy plot still show how much."""

from __future__ import annotations

import pytest

from kernbench.report import serving


def _serve(peak_blocks: int, blocks: int) -> dict:
    lat = {"p50": 1e-5, "p90": 1e-5, "p99": 1e-5, "mean": 1e-5, "max": 1e-5}
    return {"model": "m", "topology": "t", "policy": "continuous",
            "workload": {"describe": "d"},
            "steps": {"count": 3, "programs": 2, "exact": False},
            "results": {"requests": 2, "span_s": 1e-4, "ttft_s": lat, "tpot_s": lat,
                        "e2e_s": lat, "preemptions": 0, "preempted_requests": 0,
                        "throughput": {"requests_per_s": 2e4, "output_tokens_per_s": 6e4},
                        "kv_occupancy": {"blocks": blocks, "peak_blocks": peak_blocks,
                                         "peak_fraction": peak_blocks / blocks}}}


@pytest.mark.parametrize(("peak", "blocks", "shown"), [
    (182, 7_549_678, "0.0024 %"),   # a tiny model on `large`: not "0.0 %"
    (30, 40, "75.0 %"),
    (0, 40, "0.0 %"),
])
def test_the_kv_card_gives_the_peak_share_and_its_blocks(peak, blocks, shown):
    html = serving.serving_html("t", _serve(peak, blocks), {"TTFT": [1e-5]}, ([0.0], [0.0]))
    card = html[html.index("KV cache peak"):][:200]
    assert shown in card and f"{peak:,} of {blocks:,} blocks" in card, card


@pytest.mark.parametrize(("peak", "top"), [(2.4e-5, 3.0e-5), (0.1, 0.125), (0.5, 1.02),
                                           (0.0, 1.02)])
def test_the_occupancy_axis_ends_at_the_peak_when_the_cache_is_barely_used(peak, top):
    fig = serving._occupancy_fig([0.0, 1e-4, 2e-4], [0.0, peak, 0.0])
    assert fig.axes[0].get_ylim() == pytest.approx((0.0, top))


def test_the_cards_and_notes_say_what_they_count():
    """The throughput card counts output tokens (stdout's "tokens/s" counts prompt and
    output): it says so. One step of one program reads in the singular."""
    html = serving.serving_html("t", _serve(1, 2), {"TTFT": [1e-5]}, ([0.0], [0.0]))
    assert "60,000 output tok/s" in html[html.index("throughput"):][:200]
    one = _serve(1, 2)
    one["steps"] = {"count": 1, "programs": 1, "exact": True}
    html = serving.serving_html("t", one, {"TTFT": [1e-5]}, ([0.0], [0.0]))
    assert "1 step; step times from 1 simulated program (" in html
