"""MoE models from config.json: routing distributions, per-expert GEMMs, the expert layer's
numbers against a float64 numpy forward, the stats, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.ir.interpreter import run as interpret
from kernbench.ir.verify import verify
from kernbench.models import llm_moe
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, _Builder, build_llm_graph, weight_params
from kernbench.models.moe_routing import (
    Routing,
    expert_choice,
    expert_counts,
    imbalance,
    parse_routing,
)

CONFIGS = Path(__file__).parent.parent / "hf_configs"


# ------------------------------------------------------------------ distributions
def test_uniform_counts_have_binomial_mean_and_variance():
    """Each expert's count over T tokens choosing k of E is Binomial(T, k/E)."""
    t, e, k, layers = 2000, 8, 2, 300
    c = np.stack([expert_counts(expert_choice(Routing("uniform", 0, 5), t, e, k, i), e)
                  for i in range(layers)]).astype(float)
    p = k / e
    assert abs(c.mean() - t * p) < 1e-9  # every token picks exactly k
    var = t * p * (1 - p)
    assert abs(c.var() / var - 1) < 0.15   # 2400 samples: the estimate's sd is ~3 %
    # no expert is favoured: every expert's mean within 4 sd of the mean's spread
    assert np.all(np.abs(c.mean(axis=0) - t * p) < 4 * np.sqrt(var / layers))


@pytest.mark.parametrize("skew", [0.8, 1.2, 2.0])
def test_zipf_top_counts_follow_the_power_law(skew):
    """k = 1: the r-th most chosen expert's share is r^-s / Σ r^-s."""
    t, e = 200_000, 16
    c = np.sort(expert_counts(expert_choice(Routing("zipf", skew, 1), t, e, 1, 0), e))[::-1]
    for r in (2, 3, 4):
        assert c[0] / c[r - 1] == pytest.approx(r ** skew, rel=0.05)
    h = sum(r ** -skew for r in range(1, e + 1))
    assert c[0] / t == pytest.approx(1 / h, rel=0.03)


def test_choice_is_distinct_seeded_and_differs_per_layer_and_seed():
    r = Routing("zipf", 1.0, 7)
    a = expert_choice(r, 500, 16, 4, 3)
    assert all(len(set(row)) == 4 for row in a.tolist())
    assert np.array_equal(a, expert_choice(r, 500, 16, 4, 3))
    assert not np.array_equal(a, expert_choice(r, 500, 16, 4, 4))
    assert not np.array_equal(a, expert_choice(Routing("zipf", 1.0, 8), 500, 16, 4, 3))
    # zipf is skewed, uniform is not: over many tokens the imbalance separates them
    u = expert_counts(expert_choice(Routing(), 20_000, 16, 1, 0), 16)
    z = expert_counts(expert_choice(r, 20_000, 16, 1, 0), 16)
    assert imbalance(u) < 1.1 < 2.5 < imbalance(z)


@pytest.mark.parametrize("text,why", [("gauss", "unknown routing"), ("zipf:0", "(0, 4]"),
                                      ("zipf:4.5", "(0, 4]"), ("zipf:x", "a number"),
                                      ("uniform:1", "no skew")])
def test_bad_routing_is_an_input_error(text, why):
    with pytest.raises(InputError, match=why.replace("(", r"\(").replace("]", r"\]")):
        parse_routing(text)


# ------------------------------------------------------------------ graphs
@pytest.mark.parametrize("name,params", [("mixtral-8x7b", 46_702_792_704),
                                         ("qwen3-30b-a3b", 30_532_122_624),
                                         ("moonlight-16b-a3b", 15_960_108_570),
                                         ("deepseek-v3", 671_026_404_410)])
def test_real_moe_configs_parameter_counts(name, params):
    """The published totals (46.7 B, 30.5 B, 16 B, 671 B without the MTP layer)."""
    g = build_llm_graph(load_hf_config(CONFIGS / name), LlmShape(1, 1, 8))
    assert weight_params(g) == params


def test_expert_gemms_have_the_routed_rows():
    a = load_hf_config(CONFIGS / "qwen3-30b-a3b")
    r = Routing("zipf", 1.5, 2)
    g = build_llm_graph(a, LlmShape(2, 32, 0), routing=r)
    verify(g)
    loads = g.metadata["llm"]["moe"]["layers"]
    assert len(loads) == a.n_layers
    for i in (0, 17):
        want = expert_counts(expert_choice(r, 64, 128, 8, i), 128)
        gates = {n.id.split(".")[2]: n.shape["M"] for n in g.nodes
                 if n.id.startswith(f"l{i}.experts.") and n.id.endswith(".gate")}
        assert {int(e): m for e, m in gates.items()} == {e: int(c) for e, c in
                                                          enumerate(want) if c}
        assert loads[i]["tokens_per_expert"] == want.tolist()


def _moe_only(arch, t, choice):  # noqa: ANN001
    """A graph of one expert layer on input x [1, t, d], routed by `choice`."""
    b = _Builder(arch, LlmShape(1, t, 0), Routing())
    x = b.act("x", [1, t, arch.d_model], role="activation")
    b.g.inputs.append(x)
    orig = llm_moe.expert_choice
    llm_moe.expert_choice = lambda *_a: choice
    try:
        out, _ = llm_moe.moe_mlp(b, 0, x, Routing())
    finally:
        llm_moe.expert_choice = orig
    b.g.outputs.append(out)
    b.g.rebuild_links()
    return b.g


def _numpy_moe(arch, x, w):  # noqa: ANN001
    """float64 reference of the expert layer (Mixtral / DeepSeek routing)."""
    m = arch.moe
    x = x.reshape(-1, arch.d_model).astype(np.float64)
    logits = x @ w["l0.moe.router.weight"]
    scores = 1 / (1 + np.exp(-logits)) if m.scoring == "sigmoid" else logits
    top = np.argsort(-scores, axis=1, kind="stable")[:, :m.top_k]
    s = np.take_along_axis(scores, top, axis=1)
    if m.scoring == "sigmoid":
        wt = s / s.sum(1, keepdims=True) if m.norm_topk else s
    else:
        wt = np.exp(s - s.max(1, keepdims=True))
        wt /= wt.sum(1, keepdims=True)
    wt = wt * m.scale

    def mlp(v, pre):  # noqa: ANN001, ANN202
        g = v @ w[f"{pre}.gate.weight"]
        return (g / (1 + np.exp(-g)) * (v @ w[f"{pre}.up.weight"])) @ w[f"{pre}.down.weight"]

    y = np.zeros_like(x)
    for ti in range(x.shape[0]):
        for j in range(m.top_k):
            y[ti] += wt[ti, j] * mlp(x[ti:ti + 1], f"l0.experts.{top[ti, j]}")[0]
    if m.n_shared:
        y += mlp(x, "l0.experts.shared")
    return y, top


@pytest.mark.parametrize("name", ["tiny-mixtral.json", "tiny-deepseek-v3.json"])
def test_expert_layer_matches_numpy(name):
    arch = load_hf_config(CONFIGS / name)
    t, rng = 24, np.random.default_rng(0)
    x = rng.normal(size=(1, t, arch.d_model)).astype(np.float32)
    g0 = _moe_only(arch, t, np.zeros((t, arch.moe.top_k), dtype=np.int64) +
                   np.arange(arch.moe.top_k))
    w = {k: rng.normal(0, 0.2, size=np.shape(v)).astype(np.float32) if np.ndim(v) else v
         for k, v in g0.weights.items()}
    w.update({k: np.float32(arch.moe.scale).reshape(1) for k in w if k.endswith("moe.scale")})
    ref, top = _numpy_moe(arch, x, {k: np.asarray(v, np.float64) for k, v in w.items()})
    g = _moe_only(arch, t, top)                  # routed as the data routes
    g.weights.update(w)
    verify(g)
    got = interpret(g, {"x": x}, quantize=False)[g.outputs[0]]
    np.testing.assert_allclose(got.reshape(t, -1), ref, rtol=1e-4, atol=1e-4)
    # compiled for another routing, the same data is refused at the route
    other = np.roll(top, 1, axis=0) if len({tuple(r) for r in top.tolist()}) > 1 else top
    g2 = _moe_only(arch, t, (other + 1) % arch.moe.n_experts)
    g2.weights.update(w)
    with pytest.raises(InputError, match="compiled for"):
        interpret(g2, {"x": x}, quantize=False)


# ------------------------------------------------------------------ CLI and stats
def test_run_reports_per_expert_load(tmp_path, capsys):
    rc = main(["run", str(CONFIGS / "tiny-qwen3-moe.json"), "--seq-len", "32",
               "--routing", "zipf:2", "--routing-seed", "4", "-o", str(tmp_path / "o"),
               "--no-report", "--quiet"])
    assert rc == 0
    s = json.loads((tmp_path / "o" / "stats.json").read_text())
    m = s["moe"]
    assert m["routing"] == {"dist": "zipf", "skew": 2.0, "seed": 4, "same_layers": False}
    assert m["moe_layers"] == 2 and m["top_k"] == 2
    for ly in m["layers"]:
        c = np.asarray(ly["tokens_per_expert"])
        assert c.sum() == 32 * 2
        assert ly["imbalance"] == pytest.approx(c.max() / c.mean())
    tot = np.asarray(m["total"]["tokens_per_expert"])
    assert tot.sum() == 2 * 64 and m["total"]["imbalance"] == pytest.approx(tot.max() / tot.mean())


@pytest.mark.parametrize("args,word", [
    (["--routing", "normal"], "unknown routing distribution"),
    (["--routing", "zipf:7"], "skew must be in"),
    (["--routing-seed", "-2"], "seed must be"),
    (["--routing", "zipf", "--generate", "2"], "not passed to the decode steps"),
])
def test_cli_bad_routing_is_one_line_exit_2(tmp_path, capsys, args, word):
    rc = main(["run", str(CONFIGS / "tiny-mixtral.json"), *args, "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and word in err[0]
    assert not (tmp_path / "o").exists()


def test_cli_routing_on_a_dense_model_is_refused(tmp_path, capsys):
    rc = main(["run", str(CONFIGS / "tiny-llama.json"), "--routing", "zipf", "-o",
               str(tmp_path / "o")])
    assert rc == 2 and "no experts" in capsys.readouterr().err


def test_dense_layers_and_mla_cache_as_the_configs_say(tmp_path):
    ds = load_hf_config(CONFIGS / "deepseek-v3")
    assert ds.moe.dense_layers == (0, 1, 2) and ds.moe.n_shared == 1
    assert ds.moe.scoring == "sigmoid" and ds.moe.scale == 2.5
    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-deepseek-v3.json"), LlmShape(2, 1, 5))
    ml = load_hf_config(CONFIGS / "tiny-deepseek-v3.json").mla
    # decompressed MLA: every head's K (rope + nope dims) and V (v dims) are cached
    assert g.tensors["present.0.key"].shape == [2, 4, 6, ml.rope_dim + ml.nope_dim]
    assert g.tensors["present.0.value"].shape == [2, 4, 6, ml.v_dim]
    assert not any(n.id.startswith("l0.moe.") for n in g.nodes)  # first_k_dense_replace 1
    assert any(n.id.startswith("l1.moe.") for n in g.nodes)
    body = json.loads((CONFIGS / "tiny-qwen3-moe.json").read_text())
    body.update({"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    (tmp_path / "q.json").write_text(json.dumps(body))
    q = load_hf_config(tmp_path / "q.json")
    assert [q.moe.is_moe(i) for i in range(4)] == [False, True, False, False]


@pytest.mark.parametrize("change,word", [({"num_experts_per_tok": 9}, "experts per token"),
                                         ({"num_experts": 0}, "num_experts")])
def test_bad_moe_config_is_one_line(tmp_path, capsys, change, word):
    body = json.loads((CONFIGS / "tiny-qwen3-moe.json").read_text())
    body.update(change)
    (tmp_path / "c.json").write_text(json.dumps(body))
    rc = main(["run", str(tmp_path / "c.json"), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and word in err[0]


def test_same_routing_in_every_layer_is_replayed_within_one_percent(tmp_path, capsys):
    """--routing-same-layers: identical blocks, so the run replays them; its step time is
    the --exact run's within the replay's 1 % check."""
    body = json.loads((CONFIGS / "tiny-mixtral.json").read_text())
    body["num_hidden_layers"] = 6
    cfg = tmp_path / "m6.json"
    cfg.write_text(json.dumps(body))
    args = [str(cfg), "--kv-len", "16", "--batch", "2", "--routing", "zipf:1.5",
            "--routing-same-layers", "--no-report", "--quiet"]
    assert main(["run", *args, "-o", str(tmp_path / "r")]) == 0
    assert main(["run", *args, "--exact", "-o", str(tmp_path / "e")]) == 0
    r = json.loads((tmp_path / "r" / "stats.json").read_text())
    e = json.loads((tmp_path / "e" / "stats.json").read_text())
    assert r["replay"]["blocks"] == 6 and "replay" not in e
    assert r["total_ns"] == pytest.approx(e["total_ns"], rel=0.01)
    loads = [ly["tokens_per_expert"] for ly in r["moe"]["layers"]]
    assert all(c == loads[0] for c in loads) and r["moe"]["routing"]["same_layers"]
