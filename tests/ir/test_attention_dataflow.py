"""The dataflow attention matcher (ADR-0108): every exporter spelling of attention in
tests/ir/attention_spellings.py becomes one ATTENTION layer, whose float result matches
onnxruntime on the original graph; some also run through the whole stack (tiled, int8,
`--verify`). A batched MatMul that is not attention is tiled, not a whole-layer op."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from attention_spellings import SPELLINGS, batched_matmul, build

from kernbench.cli import main
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph
from kernbench.ir.interpreter import Interpreter
from kernbench.ir.onnx_import import import_model_proto
from kernbench.ir.qconfig import QConfig
from kernbench.topology import load_topology

FP32 = QConfig.model_validate({"default": {"weight": "fp32", "activation": "fp32",
                                           "kv": "fp32"}})


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    import onnxruntime as ort  # optional heavy dependency: only this reference needs it

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_spelling_fuses_to_one_attention(name):
    model, feeds = build(name)
    g = import_model_proto(model, FP32)
    ops = Counter(g.op_types())
    assert ops["ATTENTION"] == 1, ops
    for gone in ("MATMUL", "EINSUM", "SOFTMAX"):
        assert ops[gone] == 0, (gone, ops)
    got = Interpreter(g).run(feeds)[g.outputs[0]]
    want = _ort(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_attributes_follow_the_dataflow():
    att = {}
    for name in ("scale_on_q_and_k", "soft_cap", "gqa_expand", "mqa_broadcast", "no_scale",
                 "alibi_heads_merged"):
        g = import_model_proto(build(name)[0], FP32)
        att[name] = next(n.attributes for n in g.nodes if n.op_type == "ATTENTION")
    assert att["scale_on_q_and_k"]["scale"] == pytest.approx(8 ** -0.5, rel=1e-6)
    assert att["no_scale"]["scale"] == 1.0
    assert att["soft_cap"]["softcap"] == pytest.approx(2.0)
    assert att["soft_cap"]["scale"] == pytest.approx(8 ** -0.5, rel=1e-6)
    assert (att["gqa_expand"]["num_heads"], att["gqa_expand"]["num_kv_heads"]) == (4, 2)
    assert (att["mqa_broadcast"]["num_heads"], att["mqa_broadcast"]["num_kv_heads"]) == (4, 1)
    assert att["alibi_heads_merged"]["mask"] == "additive"


def test_not_attention_when_probabilities_are_reused():
    """A softmax whose output is also a graph output is not fused (it must be kept)."""
    model, feeds = build("scale_on_scores_mul")
    sm = next(n for n in model.graph.node if n.op_type == "Softmax")
    model.graph.output.append(onnx.helper.make_tensor_value_info(sm.output[0], 1, [2, 4, 5, 5]))
    g = import_model_proto(model, FP32)
    assert Counter(g.op_types())["ATTENTION"] == 0


def _run(tmp_path: Path, model: onnx.ModelProto, feeds: dict, qconfig: QConfig | None = None):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "in.npz", **feeds)
    extra = []
    if qconfig is not None:
        (tmp_path / "q.yaml").write_text(json.dumps(qconfig.model_dump(mode="json")))
        extra = ["--qconfig", str(tmp_path / "q.yaml")]
    code = main(["run", str(path), "--topology", "small", "--out", str(tmp_path / "out"),
                 "--verify", "--inputs", str(tmp_path / "in.npz"), "--no-trace",
                 "--no-report", "--keep-bundle", *extra])
    assert code == 0
    return json.loads((tmp_path / "out" / "verification.json").read_text())


@pytest.mark.parametrize(("name", "qconfig"), [
    ("soft_cap", None), ("alibi_heads_merged", None), ("gqa_expand", None), ("einsum", None),
    ("bool_mask", None), ("soft_cap", FP32), ("mqa_broadcast", FP32),
    ("kv_cache_concat", FP32)], ids=lambda x: "fp32" if x is FP32 else "w8a8" if x is None
    else x)  # fmt: skip
def test_spelling_runs_tiled_and_verifies(tmp_path, capsys, name, qconfig):
    """Compiled (int8 or fp32 attention tiles, no whole-layer TE op), simulated, and
    verified: exact vs the interpreter, within the mode's tolerance vs onnxruntime."""
    model, feeds = build(name)
    g = import_model_proto(model, qconfig)
    state, _ = compile_graph(g, load_topology("small"))
    census = layer_op_census(state)
    assert census.te_shaped == 0, census.by_op
    v = _run(tmp_path, model, feeds, qconfig)
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}


@pytest.mark.parametrize("qconfig", [None, FP32], ids=["int8", "fp32"])
def test_batched_matmul_is_tiled_and_exact(tmp_path, capsys, qconfig):
    model, feeds = batched_matmul()
    g = import_model_proto(model, qconfig)
    assert Counter(g.op_types())["MATMUL"] == 1
    state, _ = compile_graph(g, load_topology("small"))
    census = layer_op_census(state)
    assert census.te_shaped == 0, census.by_op
    te = [op for op in state.tiles.ops if op.opcode == "TE_GEMM_TILE"]
    assert len({op.pe for op in te}) > 1  # spread over the PEs, not one
    v = _run(tmp_path, model, feeds, qconfig)
    assert v["ok"] and all(c["ok"] for c in v["checks"])
