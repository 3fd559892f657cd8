"""The cost model on a whole compiled model (a one-block GPT-2 of width 256 at seq 64) on
`small` (4 PEs) and `base` (64 PEs, four cubes, UCIe): the end-to-end estimate within 15 %
of the simulated time, and the per-layer `busy_ns` defined as docs/stats.md says,
recomputed here from the entry rows by an independent sweep.

The 15 % is the accuracy ADR-0702 claims, not a correctness check: the cost model calls
the simulator's own formulas (gemm_cycles, math_cycles, channel_shares, wire_bytes), so a
wrong formula moves both. Each formula and the cost model's schedule are checked against
closed forms in tests/compiler/test_cost.py (SCALE-Sim's fold count, the lane count, a
hand-priced dependency chain)."""

from __future__ import annotations

import json
from collections import defaultdict

import onnx
import pytest

from kernbench.cli import main as cli_main
from kernbench.models.builders import build_gpt2


def _busy_by_sweep(entries: dict) -> dict[str, float]:
    """Per layer: over its PEs, the longest total time covered by at least one of the
    layer's entries on that PE (a sweep over start / end events, not interval merging)."""
    events: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for row in entries.values():
        if row["layer_id"] and row["pe"] and row["start_ns"] is not None:
            events[(row["layer_id"], row["pe"])] += [(row["start_ns"], 1), (row["end_ns"], -1)]
    out: dict[str, float] = defaultdict(float)
    for (lid, _), evs in events.items():
        evs.sort(key=lambda x: (x[0], -x[1]))  # a start at t joins an interval ending at t
        covered, depth, since = 0.0, 0, 0.0
        for t, d in evs:
            if depth == 0 and d > 0:
                since = t
            depth += d
            if depth == 0:
                covered += t - since
        out[lid] = max(out[lid], covered)
    return out


@pytest.mark.parametrize("topology", ["small", "base"])
def test_estimate_within_15_percent_and_busy_as_documented(tmp_path, topology):
    model = tmp_path / "gpt2_1block.onnx"
    onnx.save(build_gpt2(n_layer=1, d=256, heads=4, seq=64, vocab=512), str(model))
    out = tmp_path / "out"
    # --all-pes: the program spreads over the whole topology (what this test is about),
    # not over the few PEs the PE choice would keep this small model on (ADR-0711)
    code = cli_main(["run", str(model), "--topology", topology, "--out", str(out),
                     "--no-trace", "--quiet", "--all-pes"])
    assert code == 0
    stats = json.loads((out / "stats.json").read_text())
    total, est = stats["total_ns"], stats["estimate_ns"]
    assert abs(est - total) <= 0.15 * total, (est, total)
    layers = stats["layers"]
    sweep = _busy_by_sweep(stats["entries"])
    weight = within = 0.0
    for lid, row in layers.items():
        # busy: a part of the span; at least the layer's longest entry; the sweep's figure
        assert row["busy_ns"] <= row["ns"] + 1e-3
        assert row["busy_ns"] == pytest.approx(sweep[lid], abs=1e-2)
        longest = max(r["end_ns"] - r["start_ns"] for r in stats["entries"].values()
                      if r["layer_id"] == lid and r["start_ns"] is not None)
        assert row["busy_ns"] >= longest - 1e-3
        weight += row["busy_ns"]
        if abs(row["estimate_busy_ns"] - row["busy_ns"]) <= 0.15 * row["busy_ns"]:
            within += row["busy_ns"]
    # most of the layers' time is estimated within 15 % (ADR-0702, "Measured after the
    # merges": 0.79 on base since the tiled embedding gather, 1 row per PE, is mis-estimated)
    assert within >= 0.75 * weight
