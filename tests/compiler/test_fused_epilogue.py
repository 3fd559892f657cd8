"""Element-wise consumers run in the GEMM's epilogue (ADR-0701): no HBM round trip, the
consumer still in stats, the data pass exact against the interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main

GPT2 = Path(__file__).parent.parent / "models" / "gpt2.onnx"


def _model(path: Path, residual_late: bool, y_out: bool = False) -> None:
    """y = Gelu(x·w1) ; z = (y·w2) + r, with r = Relu(x·w3) produced before the second
    MatMul (fusable) or after it in node order (`residual_late`: must not be fused);
    `y_out`: y is read by a Relu too, whose output y2 is a graph output."""
    rng = np.random.default_rng(0)
    w1, w2, w3 = ((rng.standard_normal(s) * 0.1).astype(np.float32)
                  for s in ((64, 128), (128, 64), (64, 64)))
    gelu = helper.make_node("Gelu", ["h1"], ["y"], name="gelu")
    mm1 = helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1")
    mm2 = helper.make_node("MatMul", ["y", "w2"], ["h2"], name="mm2")
    mm3 = helper.make_node("MatMul", ["x", "w3"], ["h3"], name="mm3")
    relu = helper.make_node("Relu", ["h3"], ["r"], name="relu")
    add = helper.make_node("Add", ["h2", "r"], ["z"], name="add")
    nodes = [mm1, gelu, mm2, mm3, relu, add] if residual_late \
        else [mm3, relu, mm1, gelu, mm2, add]
    if y_out:
        nodes.append(helper.make_node("Relu", ["y"], ["y2"], name="relu2"))
    g = helper.make_graph(
        nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [32, 64])]
        + ([helper.make_tensor_value_info("y2", TensorProto.FLOAT, [32, 128])] if y_out else []),
        [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)],
                                ir_version=9), path)


def _run(tmp: Path, model: Path) -> tuple[list[dict], dict, dict]:
    out = tmp / "out"
    assert main(["run", "--keep-bundle", str(model), "--out", str(out), "--verify",
                 "--dump-intermediates", "--no-trace"]) == 0
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    stats = json.loads((out / "stats.json").read_text())
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and v["checks"][0]["max_abs_err"] == 0  # exact vs the interpreter
    return cmdq, stats, json.loads((out / "bundle" / "memory.json").read_text())


def _ops(cmdq: list[dict], op_type_prefix: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in cmdq:
        if e.get("layer_id", "") and e["layer_id"].startswith(op_type_prefix):
            out.setdefault(e["layer_id"], set()).add(e["opcode"])
    return out


def test_gelu_and_residual_add_run_in_the_gemm_epilogue(tmp_path):
    _model(tmp_path / "m.onnx", residual_late=False)
    cmdq, stats, mem = _run(tmp_path, tmp_path / "m.onnx")
    gelu, add = _ops(cmdq, "gelu"), _ops(cmdq, "add")
    # the consumer loads nothing of the GEMM's output: it works on the accumulator tile
    # (and quantizes it there for the GEMM that reads it next: lower/xquant.py)
    assert list(gelu.values()) == [{"VE_GELU_TILE", "VE_QUANTIZE_TILE", "DMA_STORE_TILE"}]
    # the ADD loads only its residual
    assert list(add.values()) == [{"VE_ADD_TILE", "DMA_LOAD_TILE", "DMA_STORE_TILE"}]
    for lid in (*gelu, *add):
        assert lid in stats["layers"]
    # the fused GEMM outputs have no storage (h1 into the GELU, h2 into the ADD), nor has
    # y: mm2 reads it int8 only, so the GELU stores it quantized only (ADR-0719)
    stored = {v["tensor"] for v in mem["tensors"].values() if v["role"] == "intermediate"}
    assert stored == {"h3", "r"}
    gelu_stores = [e for e in cmdq if e["layer_id"] in gelu and e["opcode"] == "DMA_STORE_TILE"]
    assert gelu_stores and all(e["qbits"] == 8 for e in gelu_stores)


def test_a_float_read_by_more_than_the_gemm_is_still_stored(tmp_path):
    # a Relu reads y too: the GELU stores it as float beside the int8 copy mm2 reads
    _model(tmp_path / "m.onnx", residual_late=False, y_out=True)
    cmdq, _, mem = _run(tmp_path, tmp_path / "m.onnx")
    gelu = _ops(cmdq, "gelu")
    stores = [e for e in cmdq if e["layer_id"] in gelu and e["opcode"] == "DMA_STORE_TILE"]
    assert {e["qbits"] for e in stores} == {8, 32}
    assert "y" in {v["tensor"] for v in mem["tensors"].values()}


def test_a_residual_written_after_the_gemm_is_not_fused(tmp_path):
    _model(tmp_path / "m.onnx", residual_late=True)
    cmdq, _, _ = _run(tmp_path, tmp_path / "m.onnx")
    add = _ops(cmdq, "add")
    assert list(add.values()) == [{"VE_ADD_TILE", "DMA_LOAD_TILE", "DMA_STORE_TILE"}]
    loads = [e for e in cmdq if e["opcode"] == "DMA_LOAD_TILE"
             and e["layer_id"].startswith("add")]
    rows = sum(e["num_elements"] for e in loads)
    assert rows == 2 * 32 * 64  # both operands loaded: a row-wise ADD of its own


def test_gpt2_fuses_every_mlp_gelu_and_residual_add(tmp_path):
    cmdq, stats, _ = _run(tmp_path, GPT2)
    gelu = _ops(cmdq, "gelu")
    assert gelu and all(ops == {"VE_GELU_TILE", "VE_QUANTIZE_TILE", "DMA_STORE_TILE"}
                        for ops in gelu.values())
    assert all(lid in stats["layers"] for lid in gelu)
    # the reshapes between a GEMM and its fused consumer (or an unstored float and its
    # GEMM) lose their storage with what they alias, yet they are views: no roofline bytes
    bounds = json.loads((tmp_path / "out" / "bundle" / "roofline.json").read_text())
    with_ops = {e["layer_id"] for e in cmdq}
    views = [lid for lid, b in bounds.items() if b["op_type"] in ("RESHAPE", "TRANSPOSE")]
    assert views and all(bounds[v]["bytes"] == 0 for v in views if v not in with_ops)


def test_gpt2_attention_reads_int8_kv_and_quantizes_its_output(tmp_path):
    # the QKV projection stores K and V at 8 KV bits beside the fp32 store and the
    # attention loads them as they are; the attention stores its output quantized for the
    # output projection (lower/xquant.py). `_run` checks exactness against the interpreter.
    cmdq, _, mem = _run(tmp_path, GPT2)

    def layer(e: dict, prefix: str) -> bool:
        return (e.get("layer_id") or "").startswith(prefix)

    kv_loads = [e for e in cmdq if layer(e, "attention") and e["opcode"] == "DMA_LOAD_TILE"
                and e.get("tensor_role") == "kv"]
    assert kv_loads and all(e["qbits"] == 8 for e in kv_loads)
    attn_layers = {e["layer_id"] for e in cmdq if layer(e, "attention")}
    kv8 = [k for k in mem["tensors"] if k.endswith("@kv8")]
    assert len(kv8) == 2 * len(attn_layers)  # K and V of every layer
    qkv_quant = [e for e in cmdq if layer(e, "qkv_proj") and e["opcode"] == "VE_QUANTIZE_TILE"]
    assert qkv_quant and all(e["out_qbits"] == 8 for e in qkv_quant)
    # no GEMM quantizes its own activation: the layer norms, the fused GELU epilogues
    # and now the attention store it int8 for them
    assert not [e for e in cmdq if layer(e, "gemm") and e["opcode"] == "VE_QUANTIZE_TILE"]
    # and as nothing else reads those float values, they are stored int8 only (ADR-0719)
    for prefix in ("layer_norm", "gelu", "attention"):
        stores = [e for e in cmdq if layer(e, prefix) and e["opcode"] == "DMA_STORE_TILE"
                  and e.get("tensor_role") == "activation"]
        assert stores and all(e["qbits"] == 8 for e in stores), prefix
    assert not [k for k in mem["tensors"] if k.startswith("layer_norm") and "@" not in k]


def _fused_chains(cmdq: list[dict]) -> list[list[str]]:
    return [[s["opcode"] for s in e["steps"]] for e in cmdq if e["opcode"] == "VE_FUSED_TILE"]


def test_decode_runs_its_one_row_vector_chains_as_fused_tiles(tmp_path):
    """A decode step (one row): the GEMM epilogues (dequantize → GELU → quantize), the
    first LayerNorm with its quantize, and the row reductions (split-K adds → dequantize
    → residual ADD → LayerNorm → quantize, ADR-0733) run as VE_FUSED_TILE entries
    (ADR-0724), every step on one row, none of those ops is left as an entry of its own,
    and the outputs stay exact against the interpreter."""
    out = tmp_path / "out"
    assert main(["run", "gpt2", "--kv-len", "16", "--keep-bundle", "--out", str(out),
                 "--verify", "--dump-intermediates", "--no-trace"]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert "interpreter" in {c["reference"] for c in v["checks"]}
    assert v["ok"] and all(c["max_abs_err"] == 0 for c in v["checks"]
                           if c["reference"] == "interpreter")
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    chains = _fused_chains(cmdq)
    assert ["VE_DEQUANTIZE_TILE", "VE_GELU_TILE", "VE_QUANTIZE_TILE"] in chains
    tail = ["VE_DEQUANTIZE_TILE", "VE_ADD_TILE", "VE_LAYERNORM_TILE", "VE_QUANTIZE_TILE"]
    reduced = [c for c in chains if c[-4:] == tail]
    assert reduced and all(c[0] == "VE_ELEMENTWISE_TILE" for c in reduced)
    assert ["VE_LAYERNORM_TILE", "VE_QUANTIZE_TILE"] in chains
    # one row each (an int32 add names its shape instead of rows)
    assert all(s.get("rows", (s.get("out_shape") or [0])[0]) == 1
               for e in cmdq for s in e.get("steps", []))
    assert not any(e["opcode"] in ("VE_GELU_TILE", "VE_LAYERNORM_TILE") for e in cmdq)


def test_prefill_keeps_multi_row_chains_as_separate_entries(tmp_path):
    """Chains of tiles of several rows are not fused: measured slower (ADR-0724)."""
    out = tmp_path / "b"
    assert main(["compile", "gpt2", "--seq-len", "8", "-o", str(out)]) == 0
    cmdq = json.loads((out / "cmdq.json").read_text())["cmdq"]
    gelus = [e for e in cmdq if e["opcode"] == "VE_GELU_TILE"]
    assert gelus and all(e["rows"] > 1 for e in gelus)
    assert not any(s.get("rows", 1) > 1 for e in cmdq for s in e.get("steps", []))
