from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ir_helpers import cosine, io, model_path

from kernbench.errors import InputError
from kernbench.ir import QConfig, load_qconfig
from kernbench.ir.interpreter import run
from kernbench.ir.onnx_import import import_onnx
from kernbench.ir.qconfig import parse_qconfig


def test_defaults_w8a8kv8():
    qc = parse_qconfig({})
    assert (qc.default.weight, qc.default.activation, qc.default.kv) == (8, 8, 8)


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text(
        "default: {weight: 8, activation: 8, kv: 8}\n"
        "overrides:\n"
        "  - match: '*layers.0.mlp*'\n"
        "    weight: 4\n"
        "  - match: '*layers.1.self_attn*'\n"
        "    kv: 4\n"
    )
    g = import_onnx(model_path("llama"), load_qconfig(p))
    for n in g.nodes:
        name = n.metadata["layer_name"]
        if n.op_type == "GEMM" and "layers.0.mlp" in name:
            assert n.qbits_weight == 4
        elif n.op_type == "GEMM" and "layers.1.mlp" in name:
            assert n.qbits_weight == 8
        if n.op_type == "ATTENTION":
            assert n.qbits_kv == (4 if "layers.1." in name else 8)
        if n.op_type in ("RMS_NORM", "SILU", "ROPE"):
            assert n.qbits_activation is None and n.qbits_weight is None
    w4 = [t for t in g.tensors.values() if t.role == "weight" and t.qbits == 4]
    assert len(w4) == 3
    assert g.qconfig["overrides"][0]["weight"] == 4


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_float_modes(mode):
    g = import_onnx(model_path("gpt2"), QConfig.float_mode(mode))
    assert all(n.qbits_activation == mode for n in g.nodes if n.op_type == "GEMM")
    ins, outs = io("gpt2")
    got = run(g, ins)["logits"]
    assert cosine(got, outs["logits"]) >= 0.999
    assert not np.array_equal(got, run(g, ins, quantize=False)["logits"])


@pytest.mark.parametrize(
    "data, field",
    [
        ({"default": {"weight": 3}}, "default.weight"),
        ({"defaults": {}}, "defaults"),
        ({"overrides": [{"match": "*", "wieght": 4}]}, "overrides.0.wieght"),
        ([1, 2], None),
    ],
)
def test_invalid(data, field):
    with pytest.raises(InputError) as ei:
        parse_qconfig(data, file="q.yaml")
    if field:
        assert field in str(ei.value)


def test_imported_bits_win_unless_overridden():
    g = import_onnx(model_path("llama_int4"))
    assert {n.qbits_weight for n in g.nodes if n.op_type in ("GEMM", "QKV_PROJ")} == {4}
    # model is weight-only quantized: activations stay float by default
    assert all(n.qbits_activation is None for n in g.nodes)
    # (the int4 quantizer renamed the nodes and dropped the module metadata)
    qc = parse_qconfig({"overrides": [{"match": "node_linear_3_*", "weight": 8}]})
    g2 = import_onnx(model_path("llama_int4"), qc)
    bits = {n.metadata["layer_name"]: n.qbits_weight for n in g2.nodes if n.op_type == "GEMM"}
    assert bits.pop("node_linear_3_matmul_Q4") == 8
    assert set(bits.values()) == {4}


@pytest.mark.parametrize("data, field", [
    ({"default": {"weight": 2}}, "default.weight"),
    ({"default": {"activation": "int2"}}, "default.activation"),
    ({"overrides": [{"match": "*", "kv": "2"}]}, "overrides.0.kv"),
])
def test_two_bits_refused_at_load(data, field):
    """2-bit widths are refused with their reason (ADR-0802): W2 verified at logits
    cosine 0.65 (gpt2) and 0.57 (llama) against onnxruntime, timed as 8-bit layer ops."""
    with pytest.raises(InputError) as ei:
        parse_qconfig(data, file="q.yaml")
    assert field in str(ei.value) and "2-bit quantization is not supported" in str(ei.value)


def test_two_bit_qconfig_cli_one_line_exit_2(tmp_path, capsys):
    from kernbench.cli import main

    q = tmp_path / "q.yaml"
    q.write_text("default: {weight: 2}\n")
    models = Path(__file__).resolve().parents[1] / "models"
    assert main(["compile", str(models / "gpt2.onnx"), "--qconfig", str(q), "-o",
                 str(tmp_path / "b"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {q}: field 'default.weight': 2-bit")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("data", "want"), [
    ({"default": {"weight": "bfp8"}}, "bfp8_b"),
    ({"default": {"weight": "BFLOAT4_B"}}, "bfp4_b"),
    ({"default": {"weight": "bfp4_b"}}, "bfp4_b"),
])
def test_block_float_weight_spellings(data, want):
    assert parse_qconfig(data).default.weight == want


@pytest.mark.parametrize(("data", "field"), [
    ({"default": {"activation": "bfp8_b"}}, "default.activation"),
    ({"default": {"kv": "bfp4"}}, "default.kv"),
    ({"overrides": [{"match": "*", "kv": "bfloat8_b"}]}, "overrides.0.kv"),
])
def test_block_float_activations_and_kv_refused(data, field):
    """Block floats are weight formats (ADR-0916): an activation or KV width in one is
    refused with the reason, not computed some other way."""
    with pytest.raises(InputError) as ei:
        parse_qconfig(data, file="q.yaml")
    assert field in str(ei.value) and "weight formats" in str(ei.value)
