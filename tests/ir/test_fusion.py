"""The importer fuses exporter graphs into the IR's ops."""

from __future__ import annotations

from collections import Counter

from ir_helpers import model_path

from kernbench.ir.onnx_import import import_onnx


def _ops(name: str) -> Counter:
    return Counter(import_onnx(model_path(name)).op_types())


def test_llama_fused():
    g = import_onnx(model_path("llama"))
    ops = Counter(g.op_types())
    assert ops["RMS_NORM"] == 5
    assert ops["QKV_PROJ"] == 2
    assert ops["ATTENTION"] == 2
    assert ops["SILU"] == 2
    assert ops["GEMM"] == 9  # o_proj, gate, up, down per layer + lm_head
    assert ops["ROPE"] == 4
    # no elementwise soup left
    for op in ("ELEMENTWISE", "SOFTMAX", "REDUCE", "MATMUL", "EXPAND", "SLICE", "CONCAT"):
        assert ops[op] == 0, op
    for n in g.nodes:
        if n.op_type == "ATTENTION":
            assert n.attributes["num_heads"] == 4 and n.attributes["num_kv_heads"] == 2
            assert n.attributes["head_dim"] == 16
            assert abs(n.attributes["scale"] - 0.25) < 1e-6
            assert n.qbits_kv == 8
        if n.op_type == "QKV_PROJ":
            assert [g.tensors[w].shape for w in n.inputs[1:4]] == [[64, 64], [64, 32], [64, 32]]


def test_llama_opset23_fused_same_way():
    ops = _ops("llama_opset23")
    assert ops["RMS_NORM"] == 5 and ops["QKV_PROJ"] == 2 and ops["ATTENTION"] == 2
    assert ops["SILU"] == 2 and ops["EXPAND"] == 0


def test_gpt2_fused():
    g = import_onnx(model_path("gpt2"))
    ops = Counter(g.op_types())
    assert ops["QKV_PROJ"] == 2 and ops["ATTENTION"] == 2 and ops["LAYER_NORM"] == 5
    gelus = [n for n in g.nodes if n.op_type == "GELU"]
    assert len(gelus) == 2 and all(n.attributes["approximate"] == "tanh" for n in gelus)
    assert ops["GEMM"] == 7  # attn.c_proj, mlp.c_fc, mlp.c_proj per layer + lm_head


def test_bert_fused():
    g = import_onnx(model_path("bert"))
    ops = Counter(g.op_types())
    assert ops["QKV_PROJ"] == 2 and ops["ATTENTION"] == 2
    gelus = [n for n in g.nodes if n.op_type == "GELU"]
    assert len(gelus) == 2 and all(n.attributes["approximate"] == "none" for n in gelus)
    # MatMul + Add(bias) became GEMM with bias
    assert all(len(n.inputs) == 3 for n in g.nodes if n.op_type == "GEMM")
    att = next(n for n in g.nodes if n.op_type == "ATTENTION")
    assert att.attributes["mask"] in ("additive", "bool") and len(att.inputs) == 4


def test_decode_kv_update():
    for name in ("gpt2_decode", "llama_decode"):
        g = import_onnx(model_path(name))
        kv = [n for n in g.nodes if n.op_type == "KV_UPDATE"]
        assert len(kv) == 4
        for n in kv:
            assert g.tensors[n.inputs[0]].role == "kv"
            assert g.tensors[n.outputs[0]].role == "kv"
            assert g.tensors[n.outputs[0]].layout == "BHSD"
            assert n.qbits_kv == 8
            assert n.shape["seq_new"] == 1 and n.shape["seq_total"] == 17


def test_views():
    g = import_onnx(model_path("llama"))
    for n in g.nodes:
        if n.op_type == "RESHAPE":
            assert n.attributes["view"] is True
            assert g.tensors[n.outputs[0]].role == "intermediate"
