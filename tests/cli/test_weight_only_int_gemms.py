"""GEMMs and QKV projections with 4- or 8-bit integer weights and fp16 / bf16 activations
(weight-only quantization) are tiled (issue 36, ADR-0986; fp32 activations too): the weight is quantized at its
bits and stored dequantized to fp32 (the values the interpreter multiplies), the TE tiles
multiply the 16-bit float activation by it into fp32, instead of running every GEMM and
QKV projection whole on one PE; `--verify` passes against the interpreter and
onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

MODELS = Path(__file__).resolve().parents[2] / "tests" / "models"


@pytest.mark.parametrize(("model", "default"), [
    ("gpt2", "{weight: 8, activation: bf16, kv: bf16}"),
    ("llama", "{weight: 8, activation: fp16, kv: 8}"),
    ("llama", "{weight: 4, activation: bf16, kv: bf16}"),
    ("llama", "{weight: 8, activation: fp32, kv: fp32}"),
])
def test_integer_weight_float_activation_gemms_are_tiled(tmp_path, capsys, model, default):
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    out = tmp_path / "o"
    code = main(["run", str(MODELS / f"{model}.onnx"), "--inputs",
                 str(MODELS / f"{model}.inputs.npz"), "--qconfig", str(q), "--verify",
                 "--quiet", "--keep-bundle", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    # the fp32-stored weights are a reported fact (their traffic is fp32's)
    bits = default.split("weight: ")[1].split(",")[0]
    assert f"store their {bits}-bit weights dequantized to fp32" in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    # the prefill attention with an int8 KV width is tiled too (float Q·K and P·V on the
    # K / V as stored, as the interpreter reads them)
    assert not [e for e in cmdq if e["opcode"] in ("TE_LAYER_OP", "VE_LAYER_OP")]
    fmt = "bf16" if "bf16" in default else "fp16"
    act = 32 if "fp32" in default else 16
    gemm = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"
            and (e.get("layer_id") or "").startswith(("gemm", "qkv"))]
    assert gemm and all(e["qbits_activation"] == act and e["qbits_weight"] == 32
                        and (act == 32 or e.get("f16_format", "fp16") == fmt) for e in gemm)
    v = json.loads((out / "verification.json").read_text())
    checks = v["checks"]
    assert v["ok"] and {c["reference"] for c in checks} == {"interpreter", "onnxruntime"}
    # the tiles sum K in another order than numpy: fp32 rounding, far below fp32 1e-5
    assert all(c["max_abs_err"] <= 1e-5 for c in checks if c["reference"] == "interpreter")


@pytest.mark.parametrize(("model", "kv_len", "kv"), [
    ("llama_decode", None, 8), ("gpt2", "4096", 8), ("llama_decode", None, 16)])
def test_float_attention_reads_an_int_cache(tmp_path, capsys, model, kv_len, kv):
    """Decode with fp16 activations and an int8 / int16 KV cache: the attention tiles DMA
    the integer cache and dequantize it (VE_DEQUANTIZE_TILE, the cache's static scale)
    into the fp32 K / V the interpreter reads; at 4096 keys along the KV-blocked path."""
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {{weight: 8, activation: fp16, kv: {kv}}}\n")
    out = tmp_path / "o"
    src = [str(MODELS / f"{model}.onnx"), "--inputs", str(MODELS / f"{model}.inputs.npz")] \
        if kv_len is None else [model, "--kv-len", kv_len]
    code = main(["run", *src, "--qconfig", str(q), "--verify", "--quiet", "--keep-bundle",
                 "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "store their 8-bit weights dequantized to fp32" in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] in ("TE_LAYER_OP", "VE_LAYER_OP")]
    att = [e for e in cmdq if (e.get("layer_id") or "").startswith("attention")]
    assert [e for e in att if e["opcode"] == "VE_DEQUANTIZE_TILE"
            and e["in_dtype"] == f"int{kv}"]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter",
                                                                  "onnxruntime"}
    assert all(c["max_abs_err"] <= 1e-5 for c in v["checks"]
               if c["reference"] == "interpreter")


@pytest.mark.parametrize(("default", "widened"), [
    ("{weight: 8, activation: bf16, kv: bf16}", True),
    ("{weight: 8, activation: 8, kv: 8}", False),
    ("{weight: bf16, activation: bf16, kv: bf16}", False),
    ("{weight: bfp8_b, activation: bf16, kv: bf16}", False),
])
def test_only_integer_weights_under_float_activations_are_reported(tmp_path, default,
                                                                   widened):
    from kernbench.compiler.lower.activation import widened_weight_layers, widened_weights_note
    from kernbench.compiler.pipeline import load_model

    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    g, _ = load_model(MODELS / "gpt2.onnx", q)
    layers = widened_weight_layers(g)
    te = [n for n in g.nodes if n.op_type in ("GEMM", "QKV_PROJ")]
    assert len(layers) == (len(te) if widened else 0)
    assert (widened_weights_note(g) is not None) == widened
