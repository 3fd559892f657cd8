"""Every whole-model figure of a replayed run against `--exact` (issue 36 / 43): the
simulated blocks stand for the replayed ones in time, bound, roofline fraction, energy,
MACs, bytes and the per-token figures, not only in `total_ns`.

Exact by construction (identical blocks compile to identical commands): MACs, HBM bytes
and every other action count except mesh hops (a block's PEs may sit elsewhere on the
mesh: ≤ 1 %), the command count, the whole-model roofline bound and the roofline point's
MACs and bytes. Time and whatever is proportional to it (static energy, per-token time,
tokens/s, roofline fraction, average power) within the replay's 1 % (block_replay
TOLERANCE); dynamic energy within 0.1 %.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench.host.block_replay import TOLERANCE
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

CONFIGS = Path(__file__).parent.parent / "hf_configs"
EXACT_ACTIONS = ("hbm_byte", "mac_int8", "mac_int4", "mac_fp16", "mac_fp32", "math_lane_cycle",
                 "port_byte", "rf_read_byte", "rf_write_byte", "tcm_read_byte",
                 "tcm_write_byte", "sram_byte", "ucie_byte")


def _run(tmp: Path, shapes: ShapeOptions, exact: bool) -> dict:
    res = resolve_model(CONFIGS / "tiny-llama-4l.json", shapes, tmp)
    return run_model(res.path, load_topology("small"), tmp,
                     RunOptions(trace=False, report=False, exact=exact),
                     RunHooks(note=lambda _m: None)).stats


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


@pytest.mark.parametrize("shapes", [ShapeOptions(1, 32, None), ShapeOptions(2, 1, 64)],
                         ids=["prefill", "decode-batch2"])
def test_every_whole_model_figure_matches_exact(tmp_path, shapes):
    rep = _run(tmp_path / "r", shapes, exact=False)
    ex = _run(tmp_path / "e", shapes, exact=True)
    assert "replay" in rep and "replay" not in ex
    # time and what follows it
    assert ("estimate_ns" in rep) == ("estimate_ns" in ex)  # a streamed run estimates none
    for key in ("total_ns", "total_cycles", "roofline_fraction", "estimate_ns"):
        if key not in ex:
            continue
        assert _close(rep[key], ex[key], TOLERANCE), (key, rep[key], ex[key])
    assert rep["model_bound"] == ex["model_bound"]
    lr, le = rep["llm"], ex["llm"]
    for key in ("step_ns", "ttft_ns", "tpot_ns", "prefill_tokens_per_s", "decode_tokens_per_s"):
        if le[key] is None:
            assert lr[key] is None
        else:
            assert _close(lr[key], le[key], TOLERANCE), (key, lr[key], le[key])
    assert lr["roofline"]["bound_ns"] == le["roofline"]["bound_ns"]
    assert _close(lr["roofline"]["fraction"], le["roofline"]["fraction"], TOLERANCE)
    for key in ("macs", "weight_bytes", "kv_cache_bytes", "params", "tokens"):
        assert lr[key] == le[key], key
    # counts: exact where identical blocks make them so
    assert rep["commands_completed"] == ex["commands_completed"]
    er, ee = rep["energy"], ex["energy"]
    for a in EXACT_ACTIONS:
        assert er["actions"][a] == ee["actions"][a], a
    assert _close(er["actions"]["mesh_hop_byte"], ee["actions"]["mesh_hop_byte"], 0.01)
    assert er["ops"] == ee["ops"]
    # energy: dynamic from the counts, static from the time
    assert _close(er["dynamic_pj"], ee["dynamic_pj"], 1e-3)
    for key in ("static_pj", "total_pj", "average_power_mw", "tops_per_w", "per_token_pj"):
        assert _close(er[key], ee[key], TOLERANCE), (key, er[key], ee[key])
    for kind, row in ee["by_component_kind"].items():
        assert _close(er["by_component_kind"][kind]["total_pj"], row["total_pj"], TOLERANCE), kind
    assert er["tokens"] == ee["tokens"]
    # the report's whole-model roofline point: the exact run's Σ over every layer
    assert rep["replay"]["model_macs"] == sum(v["macs"] for v in ex["layers"].values())
    assert rep["replay"]["model_bytes"] == sum(v["bytes"] for v in ex["layers"].values())
    assert set(rep["replay"]["simulated_only"]) >= {"engines", "layers"}

