"""Shape-only models from Hugging Face config.json files: every supported model_type builds
a verified IR graph with no weight values, compiles and simulates; parameter counts match
the closed-form count; bad configs are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.compiler.pipeline import compile_graph, write_bundle
from kernbench.host.flow import TIMING_ONLY, simulate_bundle
from kernbench.ir.model import Graph, is_shape_only_array
from kernbench.ir.verify import verify
from kernbench.models.hf_config import MODEL_TYPES, load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph, weight_params
from kernbench.topology import load_topology

CONFIGS = Path(__file__).parent.parent / "hf_configs"
TINY = sorted(CONFIGS.glob("tiny-*.json"))


def _closed_form_params(a) -> int:  # noqa: ANN001
    """Parameters of a Llama-style decoder by formula (no biases, untied)."""
    d, hd = a.d_model, a.head_dim
    attn = d * a.n_heads * hd + 2 * d * a.n_kv_heads * hd + a.n_heads * hd * d
    per_layer = attn + 3 * d * a.ffn + 2 * d
    return a.vocab * d + a.n_layers * per_layer + d + d * a.vocab


def test_every_model_type_has_a_tiny_config():
    assert {load_hf_config(p).model_type for p in TINY} == set(MODEL_TYPES)


@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
@pytest.mark.parametrize("shape", [LlmShape(2, 8, 0), LlmShape(3, 1, 24)], ids=["prefill",
                                                                              "decode"])
def test_tiny_configs_build_shape_only_ir(path, shape):
    a = load_hf_config(path)
    g = build_llm_graph(a, shape)
    verify(g)
    assert g.metadata["shape_only"] is True
    # every constant is a zero-stride stand-in: nothing materialized
    assert all(is_shape_only_array(w) or np.asarray(w).size <= 1 for w in g.weights.values())
    logits = g.tensors[g.outputs[0]]
    assert logits.shape == [shape.batch, 1, a.vocab]  # last position / one decode token
    atts = [n for n in g.nodes if n.op_type == "ATTENTION"]
    assert len(atts) == a.n_layers
    for i, n in enumerate(atts):
        k = g.tensors[n.inputs[1]]
        assert k.shape[0] == shape.batch and k.shape[1] == a.n_kv_heads
        window = a.window_of(i)
        past = min(shape.kv_len, window) if window else shape.kv_len
        assert k.shape[2] == past + shape.seq_len


def test_real_configs_parameter_counts():
    llama = load_hf_config(CONFIGS / "llama-3-8b")
    g = build_llm_graph(llama, LlmShape(1, 4, 0))
    assert weight_params(g) == _closed_form_params(llama) == 8_030_261_248
    qwen = load_hf_config(CONFIGS / "qwen2-7b" / "config.json")
    g = build_llm_graph(qwen, LlmShape(1, 4, 0))
    biases = qwen.n_layers * (qwen.n_heads + 2 * qwen.n_kv_heads) * qwen.head_dim
    assert weight_params(g) == _closed_form_params(qwen) + biases == 7_615_616_512
    assert (qwen.n_heads, qwen.n_kv_heads, qwen.sliding_window) == (28, 4, 0)


def test_mqa_tied_and_sliding_window_as_the_config_says():
    falcon = load_hf_config(CONFIGS / "tiny-falcon.json")
    assert falcon.n_kv_heads == 1 and falcon.parallel and falcon.tied
    gemma2 = load_hf_config(CONFIGS / "tiny-gemma2.json")
    assert gemma2.tied and gemma2.window_of(0) == 8 and gemma2.window_of(1) == 0
    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-mistral.json"), LlmShape(1, 1, 100))
    assert g.tensors["present.0.key"].shape[2] == 16 + 1  # rolling cache of the window


def test_compile_and_simulate_write_no_weight_values(tmp_path):
    topo = load_topology("small")
    g = build_llm_graph(load_hf_config(CONFIGS / "tiny-llama.json"), LlmShape(2, 1, 12))
    state, _ = compile_graph(g, topo)
    write_bundle(state, tmp_path / "bundle")
    with np.load(tmp_path / "bundle" / "weights.npz") as z:
        assert z.files == []
    with np.load(tmp_path / "bundle" / "ir_weights.npz") as z:
        assert all(z[k].size <= 1 for k in z.files)
    back = Graph.load(tmp_path / "bundle" / "ir.json", tmp_path / "bundle" / "ir_weights.npz")
    verify(back)  # stand-ins restored
    res = simulate_bundle(tmp_path / "bundle", topo, tmp_path, TIMING_ONLY)
    assert res.stats["total_ns"] > 0


def test_cli_runs_a_config_and_refuses_verify(tmp_path, capsys):
    cfg = CONFIGS / "tiny-qwen3.json"
    assert main(["run", str(cfg), "--batch", "2", "--seq-len", "8", "-o", str(tmp_path / "a"),
                 "--no-trace", "--no-report"]) in (0, None)
    stats = json.loads((tmp_path / "a" / "stats.json").read_text())
    assert stats["total_ns"] > 0
    capsys.readouterr()
    assert main(["run", str(cfg), "--verify", "-o", str(tmp_path / "b")]) == 2
    e = capsys.readouterr().err.strip().splitlines()
    assert len(e) == 1 and "shape-only" in e[0]


@pytest.mark.parametrize("body, word", [
    ({"model_type": "bert", "hidden_size": 8}, "model_type"),
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}, "num_attention_heads"),
    ({"hidden_size": 64, "architectures": ["X"]}, "model_type"),
    ({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "vocab_size": 8, "alibi": True}, "alibi"),
])
def test_bad_configs_are_one_line(tmp_path, capsys, body, word):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(body))
    assert main(["run", str(tmp_path), "-o", str(tmp_path / "o")]) == 2
    e = capsys.readouterr().err.strip().splitlines()
    assert len(e) == 1 and word in e[0] and str(p) in e[0]


def test_compile_then_simulate_verify_is_refused(tmp_path, capsys):
    cfg = CONFIGS / "tiny-llama.json"
    assert main(["compile", str(cfg), "--batch", "2", "--kv-len", "4", "-o",
                 str(tmp_path / "b")]) in (0, None)
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "b"), "--verify", "-o", str(tmp_path / "s")]) == 2
    e = capsys.readouterr().err.strip().splitlines()
    assert "shape-only" in e[-1]
    assert main(["simulate", str(tmp_path / "b"), "-o", str(tmp_path / "s2"), "--no-trace"]) \
        in (0, None)


def test_llama31_8b_weight_bytes_at_tt_metal_formats():
    """Llama-3.1-8B (the shapes of Llama-3-8B) at tt-metal's published formats: the step's
    weight bytes count every block-float weight at its bytes, shared exponents included
    (BFP8_B 1.0625, BFP4_B 0.5625 B a value, ADR-0916), against the closed form."""
    from kernbench.host.llm import llm_facts
    from kernbench.ir.qconfig import apply_qconfig, load_qconfig

    a = load_hf_config(CONFIGS / "llama-3.1-8b")
    assert weight_params(build_llm_graph(a, LlmShape(1, 1, 16))) == 8_030_261_248
    q = Path(__file__).resolve().parents[2] / "examples" / "qconfig"
    got = {}
    for name in ("bfp8.yaml", "bfp4-mlp-bfp8-attn.yaml"):
        g = build_llm_graph(a, LlmShape(1, 1, 16))
        apply_qconfig(g, load_qconfig(q / name))
        got[name] = llm_facts(g).weight_bytes
    d, hd = a.d_model, a.head_dim
    mlp = a.n_layers * 3 * d * a.ffn
    attn = a.n_layers * (d * a.n_heads * hd + 2 * d * a.n_kv_heads * hd + a.n_heads * hd * d)
    lm_head = d * a.vocab
    # the TE weights: BFP8 everywhere, then the MLP at BFP4 (4 bits fewer a value)
    assert got["bfp8.yaml"] - got["bfp4-mlp-bfp8-attn.yaml"] == mlp * (17 - 9) // 16
    te8 = (mlp + attn + lm_head) * 17 // 16
    assert got["bfp8.yaml"] - te8 == (a.vocab * d + (2 * a.n_layers + 1) * d) * 4  # fp32 rest


@pytest.mark.parametrize("tied", [False, True])
def test_step_reads_only_the_embedding_rows_it_gathers(tied, tmp_path):
    """The roofline's memory part: a decode step of batch 2 gathers 2 rows of the token
    embedding, not the whole table; every other weight and the KV cache are read whole.
    Tied to the LM head, the table is read whole (the LM head reads it)."""
    from kernbench.host.llm import llm_facts, llm_section
    from kernbench.topology.peaks import hbm_gbs

    body = json.loads((CONFIGS / "tiny-llama.json").read_text())
    body["tie_word_embeddings"] = tied
    (tmp_path / "config.json").write_text(json.dumps(body))
    a = load_hf_config(tmp_path / "config.json")
    f = llm_facts(build_llm_graph(a, LlmShape(2, 1, 16)))
    table = a.vocab * a.d_model * 4  # fp32: embeddings are not QConfig weights
    assert f.step_read_bytes == f.weight_bytes + f.kv_cache_bytes - (
        0 if tied else table - 2 * a.d_model * 4)
    topo = load_topology("small")
    roof = llm_section(f, {"total_ns": 1e6}, topo)["roofline"]
    assert roof["memory_bound_ns"] == pytest.approx(f.step_read_bytes / hbm_gbs(topo), abs=1e-3)
