"""The QConfig examples users copy (examples/qconfig/*.yaml, docs/quantization.md) load,
mean what their comments say on a real model, and one of them runs and verifies end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.ir.onnx_import import import_onnx
from kernbench.ir.qconfig import apply_qconfig, load_qconfig, unmatched_overrides

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "qconfig"
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
TINY_LLAMA = ROOT / "tests" / "hf_configs" / "tiny-llama.json"

#: example -> (weight, activation, kv) bits of a GEMM outside the first block, and of
#: its KV (IR values: an int, "fp16" / "bf16", None for fp32)
EXPECTED = {
    "w8a8.yaml": (8, 8, 8),
    "w4a8.yaml": (4, 8, 8),
    "w4a16_kv8.yaml": (4, 16, 8),
    "fp16.yaml": ("fp16", "fp16", "fp16"),
    "bf16.yaml": ("bf16", "bf16", "bf16"),
    "bfp8.yaml": ("bfp8_b", "bf16", "bf16"),
    "w8-bf16.yaml": (8, "bf16", "bf16"),
}
#: Llama-only examples (their globs name Llama's MLP projections)
LLAMA_EXAMPLES = ("bfp4-mlp-bfp8-attn.yaml",)
LLAMA = ROOT / "tests" / "models" / "llama.onnx"


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted([*EXPECTED,
                                                                       *LLAMA_EXAMPLES])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_sets_the_widths_it_names(name):
    qc = load_qconfig(EXAMPLES / name)
    g = import_onnx(str(GPT2))
    assert unmatched_overrides(g, qc) == []
    apply_qconfig(g, qc)
    w, a, kv = EXPECTED[name]
    later = [n for n in g.nodes if n.op_type == "GEMM"
             and ".h.0." not in str(n.metadata.get("layer_name"))]
    assert later and all((n.qbits_weight, n.qbits_activation) == (w, a) for n in later)
    attn = [n for n in g.nodes if n.op_type == "ATTENTION"]
    assert attn and all(n.qbits_kv == kv for n in attn)


def test_w4a8_keeps_the_first_block_at_8_bit_weights():
    g = import_onnx(str(GPT2))
    apply_qconfig(g, load_qconfig(EXAMPLES / "w4a8.yaml"))
    first = [n for n in g.nodes if n.op_type in ("GEMM", "QKV_PROJ")
             and ".h.0." in str(n.metadata.get("layer_name"))]
    assert len(first) == 4 and all(n.qbits_weight == 8 for n in first)


def test_w4a8_example_runs_and_verifies(tmp_path, capsys):
    code = main(["run", str(GPT2), "--qconfig", str(EXAMPLES / "w4a8.yaml"), "--verify",
                 "--quiet", "--no-trace", "--no-report", "--out", str(tmp_path / "out")])
    assert code == 0


def _llama_graphs() -> list:
    """llama.onnx and a config.json Llama (shape-only): the two names a glob must match."""
    from kernbench.models.hf_config import load_hf_config
    from kernbench.models.llm_graph import LlmShape, build_llm_graph

    hf = build_llm_graph(load_hf_config(ROOT / "tests" / "hf_configs" / "tiny-llama.json"),
                         LlmShape(batch=1, seq_len=1, kv_len=16))
    return [import_onnx(str(LLAMA)), hf]


@pytest.mark.parametrize("g", _llama_graphs(), ids=["onnx", "config.json"])
def test_bfp4_mlp_bfp8_attention_sets_tt_metal_llama_formats(g):
    """tt-metal's Llama: MLP weights BFP4_B, attention projections BFP8_B, bf16 rest."""
    qc = load_qconfig(EXAMPLES / "bfp4-mlp-bfp8-attn.yaml")
    assert unmatched_overrides(g, qc) == []
    apply_qconfig(g, qc)
    te = [n for n in g.nodes if n.op_type in ("GEMM", "QKV_PROJ")
          and n.outputs[0] not in g.outputs]  # the LM head keeps the default
    mlp = [n for n in te if any(k in (n.metadata.get("layer_name") or n.id)
                                for k in ("gate", "up", "down"))]
    attn = [n for n in te if n not in mlp]
    assert mlp and attn and len(mlp) == 3 * len([n for n in attn if n.op_type == "QKV_PROJ"])
    assert all(n.qbits_weight == "bfp4_b" and n.qbits_activation == "bf16" for n in mlp)
    assert all(n.qbits_weight == "bfp8_b" for n in attn)
    assert all(n.qbits_kv == "bf16" for n in g.nodes if n.op_type == "ATTENTION")


@pytest.mark.parametrize("name", ["bfp8.yaml", "bfp4-mlp-bfp8-attn.yaml"])
def test_block_float_examples_run_and_verify_on_llama(tmp_path, capsys, name):
    """Block-float weights are tiled (no whole-layer op) and verify: the data pass equals
    the interpreter and onnxruntime is within the BFP8 / BFP4 tolerance."""
    import json

    out = tmp_path / "out"
    code = main(["run", str(LLAMA), "--qconfig", str(EXAMPLES / name), "--verify", "--quiet",
                 "--no-trace", "--no-report", "--keep-bundle", "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    checks = {c["reference"]: c for c in v["checks"]}
    assert checks["interpreter"]["ok"] and checks["onnxruntime"]["ok"]
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]
    fmts = {e["block_float"] for e in cmdq if e.get("block_float")}
    assert fmts == ({"bfp8_b"} if name == "bfp8.yaml" else {"bfp8_b", "bfp4_b"})


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_runs_a_shape_only_config(tmp_path, capsys, name):
    # a config.json model has no weight values: every width still compiles (unit scales;
    # W4A16 stopped with an internal error) and the run says which precision it used
    code = main(["run", str(TINY_LLAMA), "--qconfig", str(EXAMPLES / name), "--quiet",
                 "--no-report", "--out", str(tmp_path / "o")])
    assert code == 0, capsys.readouterr().err
    precision = json.loads((tmp_path / "o" / "stats.json").read_text())["precision"]
    if name in EXPECTED:
        w, a, kv = EXPECTED[name]
        assert (f"int{w}" if isinstance(w, int) else w) in precision["weight"], precision
        if isinstance(a, int):
            assert f"int{a}" in precision["activation"], precision
