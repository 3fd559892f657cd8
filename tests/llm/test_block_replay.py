"""Replay of identical blocks: within 1 % of --exact on 4-layer models, refused where the
blocks differ, and never faster than the roofline bound of the whole step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.host.block_replay import plan_replay, truncate_blocks
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.ir.verify import verify
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph
from kernbench.topology import load_topology
from kernbench.topology.peaks import peak_figures

CONFIGS = Path(__file__).parent.parent / "hf_configs"


def _run(tmp: Path, cfg: Path, shapes: ShapeOptions, topo: str, exact: bool):  # noqa: ANN202
    res = resolve_model(cfg, shapes, tmp)
    notes: list[str] = []
    return run_model(res.path, load_topology(topo), tmp,
                     RunOptions(trace=False, report=False, exact=exact),
                     RunHooks(note=notes.append)), notes


@pytest.mark.parametrize("shapes", [ShapeOptions(1, 32, None), ShapeOptions(2, 1, 48)],
                         ids=["prefill", "decode-batch2"])
def test_replay_within_one_percent_of_exact(tmp_path, shapes):
    cfg = CONFIGS / "tiny-llama-4l.json"
    rep, notes = _run(tmp_path / "r", cfg, shapes, "small", exact=False)
    ex, _ = _run(tmp_path / "e", cfg, shapes, "small", exact=True)
    assert "replay" in rep.stats and "replay" not in ex.stats, notes
    assert rep.stats["replay"]["blocks"] == 4
    assert rep.stats["entry_count"] < ex.stats["entry_count"]
    t_rep, t_ex = rep.stats["total_ns"], ex.stats["total_ns"]
    assert abs(t_rep - t_ex) <= 0.01 * t_ex, (t_rep, t_ex)
    assert rep.stats["llm"]["layers"] == ex.stats["llm"]["layers"] == 4
    # the written stats.json is the replayed one
    on_disk = json.loads((tmp_path / "r" / "stats.json").read_text())
    assert on_disk["total_ns"] == t_rep


def test_fewer_simulated_blocks_within_one_percent_of_exact(tmp_path):
    """`RunOptions.replay_blocks` (serve's step programs simulate 3): an 8-block model
    simulates that many blocks, proven by the same check, within 1 % of --exact."""
    cfg = json.loads((CONFIGS / "tiny-llama-4l.json").read_text())
    cfg["num_hidden_layers"] = 8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = resolve_model(path, ShapeOptions(2, 1, 48), tmp_path / "m")
    topo = load_topology("small")

    def run(name: str, **opts: object) -> dict:
        return run_model(res.path, topo, tmp_path / name, RunOptions(
            trace=False, report=False, **opts), RunHooks(note=lambda _m: None)).stats

    ex = run("e", exact=True)
    for keep in (3, 4):
        rep = run(f"r{keep}", replay_blocks=keep)
        assert rep["replay"]["blocks"] == 8 and rep["replay"]["simulated_blocks"] == keep
        assert abs(rep["total_ns"] - ex["total_ns"]) <= 0.01 * ex["total_ns"]
    assert run("d")["replay"]["simulated_blocks"] == 4  # the default
    g = build_llm_graph(load_hf_config(path), LlmShape(2, 1, 8))
    assert plan_replay(g, 3)[0].simulated == 3
    assert plan_replay(g, 7)[0].simulated == 6  # one block before and after the middle
    with pytest.raises(ValueError, match="at least 3"):
        plan_replay(g, 2)


def test_truncated_graph_is_valid_and_keeps_the_epilogue():
    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-llama-4l.json"), LlmShape(2, 1, 8))
    plan, why = plan_replay(g)
    assert plan is not None and plan.blocks == 4, why
    small = truncate_blocks(g, plan.simulated)
    verify(small)
    assert {n.metadata.get("block") for n in small.nodes} == {None, 0, 1, 2}
    assert small.outputs[0] == g.outputs[0]  # logits
    assert "present.3.key" not in small.outputs and "past.3.key" not in small.inputs
    assert small.node("ln_final").inputs[0] == "l2.res_mlp.y"


def test_no_replay_where_blocks_differ(tmp_path):
    cfg = json.loads((CONFIGS / "tiny-gemma2.json").read_text())
    cfg["num_hidden_layers"] = 4  # sliding window on even layers only: blocks alternate
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    g = build_llm_graph(load_hf_config(p), LlmShape(1, 8, 0))
    plan, why = plan_replay(g)
    assert plan is None and "differs" in why
    g2 = build_llm_graph(load_hf_config(CONFIGS / "tiny-llama.json"), LlmShape(1, 8, 0))
    assert plan_replay(g2)[0] is None  # 2 blocks: nothing to replay


@pytest.mark.parametrize("topo", ["small", "large"])
@pytest.mark.parametrize("exact", [False, True])
def test_never_faster_than_the_roofline(tmp_path, topo, exact):
    res, _ = _run(tmp_path, CONFIGS / "tiny-llama-4l.json", ShapeOptions(2, 1, 64), topo, exact)
    s = res.stats["llm"]
    peaks = peak_figures(load_topology(topo))
    # independent bound: every MAC at the int8 peak, every weight and KV byte read once,
    # but of the fp32 token embedding (vocab 512 × d 128, untied) only the 2 rows gathered
    compute_ns = s["macs"] / peaks.macs_per_ns[8]
    embedding_unread = (512 - 2) * 128 * 4
    memory_ns = (s["weight_bytes"] + s["kv_cache_bytes"] - embedding_unread) / peaks.hbm_gbs
    assert res.stats["total_ns"] >= max(compute_ns, memory_ns)
    # the MACs by hand from config.json (d 128, 4 layers, 4 heads of 32, 2 KV heads, FFN
    # 256, vocab 512): per token and layer Q, K, V, O and the gated MLP, plus attention
    # over 64 cached + 1 new keys; the untied LM head; 2 tokens
    d, kv_dim, ffn, vocab, layers, heads, hd, keys = 128, 64, 256, 512, 4, 4, 32, 65
    per_layer = d * d + 2 * d * kv_dim + d * d + 3 * d * ffn + heads * keys * 2 * hd
    assert s["macs"] == 2 * (layers * per_layer + d * vocab)
    r = s["roofline"]
    assert r["compute_bound_ns"] == pytest.approx(compute_ns, abs=1e-3)
    assert r["memory_bound_ns"] == pytest.approx(memory_ns, abs=1e-3)
    assert r["fraction"] == pytest.approx(max(compute_ns, memory_ns) / res.stats["total_ns"],
                                          abs=5e-7)  # rounded to 1e-6 in stats.json


# llama at d 128, seq 64 has not reached a steady period by its third block since ADR-0719
# (p_1 and q_2 1.12 % apart): the check refuses that replay, as it should
@pytest.mark.parametrize(("builder", "d", "seq"), [("gpt2", 64, 32), ("llama", 128, 32)])
def test_onnx_blocks_detected_and_replayed_within_one_percent(tmp_path, builder, d, seq):
    """An ONNX model marks no blocks: they are detected (host.block_detect), proven
    identical, and the replayed total is within 1 % of simulating every layer."""
    import onnx  # optional heavy module: only this test builds an ONNX file

    from kernbench.models.builders import build_gpt2, build_llama

    build = build_gpt2 if builder == "gpt2" else build_llama
    path = tmp_path / f"{builder}4.onnx"
    onnx.save(build(n_layer=4, d=d, heads=4, seq=seq), str(path))
    topo = load_topology("small")
    opts = {"trace": False, "report": False}
    notes: list[str] = []
    rep = run_model(path, topo, tmp_path / "r", RunOptions(**opts),
                    RunHooks(note=notes.append))
    ex = run_model(path, topo, tmp_path / "e", RunOptions(exact=True, **opts),
                   RunHooks(note=lambda _m: None))
    assert "replay" in rep.stats, notes
    assert rep.stats["replay"]["blocks"] == 4
    assert rep.stats["entry_count"] < ex.stats["entry_count"]
    t_rep, t_ex = rep.stats["total_ns"], ex.stats["total_ns"]
    assert abs(t_rep - t_ex) <= 0.01 * t_ex, (t_rep, t_ex)


def test_detection_refuses_blocks_that_differ(tmp_path):
    """A model whose blocks differ (one layer's FFN wider) is not marked."""
    import onnx  # optional heavy module: only this test builds an ONNX file

    from kernbench.host.block_detect import mark_blocks
    from kernbench.ir import import_onnx
    from kernbench.models.builders import build_gpt2

    path = tmp_path / "g.onnx"
    onnx.save(build_gpt2(n_layer=4, seq=16), str(path))
    g = import_onnx(path)
    marked, why = mark_blocks(g)
    assert marked is not None and plan_replay(marked)[0] is not None, why
    # widen one GEMM of block 2 only: the blocks no longer have one signature
    nodes = [n for n in marked.nodes if n.metadata.get("block") == 2]
    out = next(o for n in nodes if n.op_type == "GEMM" for o in n.outputs)
    g.tensors[out].shape = [*g.tensors[out].shape[:-1], g.tensors[out].shape[-1] + 1]
    again, why = mark_blocks(g)
    assert again is None and "differs" in why


def _spans(small, end_of):  # noqa: ANN001, ANN202
    """LayerSpans of every node of `small`: end_of(block, position) for block layers."""
    from kernbench.common.program import LayerSpan

    spans, pos = {}, {}
    for n in small.nodes:
        b = n.metadata.get("block")
        if isinstance(b, int):
            j = pos[b] = pos.get(b, -1) + 1
            end = end_of(b, j)
        else:
            end = 10.0 if n.id == "embed" else 5000.0
        spans[n.id] = LayerSpan(start_ns=end - 5.0, end_ns=end)
    return spans


def test_check_compares_like_with_like():
    """The epilogue's overlap lengthens only the last block's last layers: the check
    accepts (the layer-wise periods are steady); blocks that are not steady are refused."""
    from kernbench.host.block_replay import ReplayCheckFailed, apply_replay

    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-llama-4l.json"), LlmShape(2, 1, 8))
    plan, _ = plan_replay(g)
    small = truncate_blocks(g, plan.simulated)
    n_layers = sum(1 for n in small.nodes if n.metadata.get("block") == 0)

    def overlapped(b: int, j: int) -> float:  # period 1000; epilogue delays the tail by 40
        return 100.0 + 1000.0 * b + 10.0 * j + (40.0 if b == 2 and j == n_layers - 1 else 0.0)

    stats = apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                         _spans(small, overlapped))
    r = stats["replay"]
    assert r["periods_ns"] == [1000.0, 1040.0]  # the old check: ±1.96 %, refused
    assert r["anchored_periods_ns"] == [1000.0]
    assert r["period_deviation"] == 0.0
    assert stats["total_ns"] == 5000.0 + 1000.0  # one block replayed at the middle period

    def unsteady(b: int, j: int) -> float:  # block 2 is 5 % late in every layer but the last
        late = 50.0 if b == 2 and j < n_layers - 1 else 0.0
        return 100.0 + 1000.0 * b + 10.0 * j + late

    with pytest.raises(ReplayCheckFailed):
        apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                     _spans(small, unsteady))


def _six_block_graph(tmp_path: Path):  # noqa: ANN202
    cfg = json.loads((CONFIGS / "tiny-llama-4l.json").read_text())
    cfg["num_hidden_layers"] = 6
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return build_llm_graph(load_hf_config(tmp_path / "config.json"), LlmShape(1, 1, 8))


def _cycle_ends(periods: list[float]):  # noqa: ANN202
    """end_of(block, position) of blocks whose block b − 1 → b period is periods[b − 1]."""
    ends = [0.0]
    for p in periods:
        ends.append(ends[-1] + p)
    return lambda b, j: 100.0 + ends[b] + 10.0 * j


def test_two_block_cycle_replays_its_whole_cycle_mean(tmp_path):
    """Periods that alternate ±2 % (a two-block cycle) are refused by the per-period check
    but accepted on their two-block means, and the replayed blocks cost the cycle's mean:
    the whole model's time equals that of blocks that keep alternating (closed form)."""
    from kernbench.host.block_replay import apply_replay

    g = _six_block_graph(tmp_path)
    plan, _ = plan_replay(g)
    assert plan is not None and (plan.blocks, plan.simulated) == (6, 4)
    small = truncate_blocks(g, plan.simulated)
    cycle = [1020.0, 980.0] * 3  # p_1 .. p_5 of all six blocks
    stats = apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                         _spans(small, _cycle_ends(cycle[:3])))
    r = stats["replay"]
    assert r["periods_ns"] == [1020.0, 980.0, 1020.0]
    assert r["anchored_periods_ns"] == [980.0, 1020.0]
    assert r["period_cycle_blocks"] == 2 and r["period_deviation"] == 0.0
    assert stats["total_ns"] == 5000.0 + sum(cycle[3:5])  # blocks 4 and 5 of the cycle


def test_drift_is_refused_on_its_two_block_means_too(tmp_path):
    """Periods that grow 4 % a block are no cycle: their two-block means differ by about
    4 % too, and the check refuses."""
    from kernbench.host.block_replay import ReplayCheckFailed, apply_replay

    g = _six_block_graph(tmp_path)
    plan, _ = plan_replay(g)
    small = truncate_blocks(g, plan.simulated)
    with pytest.raises(ReplayCheckFailed, match="two-block means"):
        apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                     _spans(small, _cycle_ends([1000.0, 1040.0, 1080.0])))


def test_steady_periods_carry_no_cycle_mark(tmp_path):
    """Periods within the per-period check are not marked as a cycle (stats unchanged)."""
    from kernbench.host.block_replay import apply_replay

    g = _six_block_graph(tmp_path)
    plan, _ = plan_replay(g)
    small = truncate_blocks(g, plan.simulated)
    stats = apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                         _spans(small, _cycle_ends([1000.0, 1004.0, 1000.0])))
    assert "period_cycle_blocks" not in stats["replay"]
    assert stats["total_ns"] == 5000.0 + 2 * 1002.0


def test_three_simulated_blocks_have_no_whole_cycle(tmp_path):
    """With 3 simulated blocks (a 4-block model) one period of each kind is compared: no
    whole two-block cycle, so alternating periods are refused."""
    from kernbench.host.block_replay import ReplayCheckFailed, apply_replay

    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-llama-4l.json"), LlmShape(1, 1, 8))
    plan, _ = plan_replay(g)
    assert plan is not None and plan.simulated == 3
    small = truncate_blocks(g, plan.simulated)
    with pytest.raises(ReplayCheckFailed):
        apply_replay({"total_ns": 5000.0, "clock_ghz": 1.0}, small, plan,
                     _spans(small, _cycle_ends([1020.0, 980.0])))


def _blocks_graph(tmp_path: Path, layers: int):  # noqa: ANN202
    cfg = json.loads((CONFIGS / "tiny-llama-4l.json").read_text())
    cfg["num_hidden_layers"] = layers
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return build_llm_graph(load_hf_config(tmp_path / "config.json"), LlmShape(1, 1, 8))


def test_more_simulated_blocks_may_leave_out_a_warm_up(tmp_path):
    """Six simulated blocks whose first two periods are 5 % and 4 % long (a warm-up) and
    the rest steady: the check leaves blocks 1 and 2 out, the replayed blocks cost the
    steady period, and the warm-up counts at its simulated time (closed form)."""
    from kernbench.host.block_replay import apply_replay

    g = _blocks_graph(tmp_path, 10)
    plan, _ = plan_replay(g, 6)
    assert plan is not None and (plan.blocks, plan.simulated) == (10, 6)
    small = truncate_blocks(g, plan.simulated)
    stats = apply_replay({"total_ns": 9000.0, "clock_ghz": 1.0}, small, plan,
                         _spans(small, _cycle_ends([1050.0, 1040.0, 1000.0, 1000.0, 1000.0])))
    r = stats["replay"]
    assert r["warmup_blocks"] == 2 and "period_cycle_blocks" not in r
    assert r["block_period_ns"] == 1000.0 and r["period_deviation"] == 0.0
    assert stats["total_ns"] == 9000.0 + 4 * 1000.0


def test_a_warm_up_is_not_left_out_of_four_simulated_blocks(tmp_path):
    """With the default 4 blocks the two middle periods are all there is: a long first
    period is refused, as before."""
    from kernbench.host.block_replay import ReplayCheckFailed, apply_replay

    g = _blocks_graph(tmp_path, 10)
    plan, _ = plan_replay(g)
    small = truncate_blocks(g, plan.simulated)
    with pytest.raises(ReplayCheckFailed, match="two-block means too\\)"):
        apply_replay({"total_ns": 9000.0, "clock_ghz": 1.0}, small, plan,
                     _spans(small, _cycle_ends([1050.0, 1000.0, 1000.0])))


def test_drift_is_refused_after_any_warm_up(tmp_path):
    """Periods that grow 2 % a block never settle: no warm-up leaves them within 1 %."""
    from kernbench.host.block_replay import ReplayCheckFailed, apply_replay

    g = _blocks_graph(tmp_path, 10)
    plan, _ = plan_replay(g, 6)
    small = truncate_blocks(g, plan.simulated)
    with pytest.raises(ReplayCheckFailed, match="after a warm-up"):
        apply_replay({"total_ns": 9000.0, "clock_ghz": 1.0}, small, plan,
                     _spans(small, _cycle_ends([1000.0 * 1.02 ** i for i in range(5)])))


def test_a_replayed_run_takes_all_pes_and_reports_its_pe_choice(tmp_path):
    """The simulated blocks are compiled with the run's options: `--all-pes` spreads them
    over every PE, and without it the cost model's choice is in stats.json and said, as in
    a run that simulates every layer."""
    cfg = CONFIGS / "tiny-llama-tp8.json"  # 6 blocks: replayed
    res = resolve_model(cfg, ShapeOptions(1, 1, 16), tmp_path / "m")
    stats, notes = {}, []
    for all_pes in (False, True):
        d = tmp_path / str(all_pes)
        stats[all_pes] = run_model(res.path, load_topology("base"), d / "out",
                                   RunOptions(trace=False, report=False, write_cmdq=False,
                                              bundle=d / "b", all_pes=all_pes),
                                   RunHooks(note=notes.append)).stats
        assert stats[all_pes]["replay"]["simulated_blocks"] < 6
    choice = stats[False]["pe_choice"]
    assert choice["pes"] < choice["of"] == 64
    assert any("PE" in n and str(choice["pes"]) in n for n in notes), notes
    assert "pe_choice" not in stats[True]
    assert stats[True]["total_ns"] != stats[False]["total_ns"]
