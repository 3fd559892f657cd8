"""Quantized graphs as they come (ADR-0706): dynamic quantization (DynamicQuantizeLinear +
MatMulInteger) tiled with run-time parameters, the QDQ attention path without whole-layer
transposes / adds / muls, and `kv: 16` as an int16 KV cache. Every run is `kernbench run
--verify`: exact against the interpreter, within the mode's tolerance against onnxruntime;
the parameters of a tiled DynamicQuantizeLinear are checked against onnxruntime's own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.cmdq.io import unfused
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.numerics import quant as qmath
from kernbench.report.layer_ops import layer_op_census_of_bundle
from kernbench.sim_engine.math_registry import MATH_OPS
from kernbench.topology import load_topology

ZOO = Path(__file__).resolve().parents[1] / "zoo"
SMALL_TCM = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
             "--set", "cube.pe_template.pe_tcm.reserved_kib=16"]


def _run(tmp_path: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[dict, Path]:
    out = tmp_path / "out"
    code = main(["run", *args, "--verify", "--keep-bundle", "--out", str(out), "--no-trace",
                 "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    return v, out / "bundle"


def _opcodes(bundle: Path) -> list[str]:
    return [e["opcode"] for e in json.loads((bundle / "cmdq.json").read_text())["cmdq"]]


def _ort_dql(x: np.ndarray) -> list[np.ndarray]:
    """onnxruntime's DynamicQuantizeLinear of x: (q, scale, zero point)."""
    import onnx  # optional heavy modules: only this reference check needs them
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, list(x.shape)),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert onnx.checker.check_model(model) is None
    return sess.run(None, {"x": x})


@pytest.mark.parametrize("shift", [-0.7, 0.0, 0.9])
def test_partial_extremes_give_onnxruntime_parameters(shift):
    """Per-block minima / maxima combined by VE_QPARAMS_TILE's op, then the run-time
    VE_QUANTIZE_TILE (zero point shifted by -128), equal onnxruntime's
    DynamicQuantizeLinear of the whole tensor (q - 128)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((24, 40)) + shift).astype(np.float32)
    blocks = np.array_split(x, 5)
    mins = np.array([b.min() for b in blocks], np.float32)
    maxs = np.array([b.max() for b in blocks], np.float32)
    qp = MATH_OPS["cmdq_dynamic_qparams"]([mins, maxs], {})
    q, s, z = _ort_dql(x)
    assert qp[0] == s and int(qp[1]) == int(z)
    got = MATH_OPS["cmdq_quantize_qparams"]([x, qp], {"bits": 8, "zero_point": -128})
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got.astype(np.int16) + 128, q.astype(np.int16))
    # the run-time zero-point column term is -(z - 128) · colsum, exactly
    colsum = rng.integers(-20000, 20000, size=16).astype(np.int32)
    corr = MATH_OPS["cmdq_zp_correction"]([colsum, qp], {"zero_point": -128})
    np.testing.assert_array_equal(corr, -(int(z) - 128) * colsum.astype(np.int64))


def test_all_zero_tensor_quantizes_to_its_zero_point():
    qp = MATH_OPS["cmdq_dynamic_qparams"]([np.zeros(3, np.float32)] * 2, {})
    assert list(qp) == [0.0, 0.0]
    x = np.zeros((2, 4), np.float32)
    got = MATH_OPS["cmdq_quantize_qparams"]([x, qp], {"bits": 8, "zero_point": -128})
    q, _, _ = qmath.dynamic_quantize_linear(x)
    np.testing.assert_array_equal(got.astype(np.int16) + 128, q)


def _dynamic_model(path: Path, w_zp: int, m: int, k: int = 48, n: int = 40) -> None:
    """x → DynamicQuantizeLinear → MatMulInteger (int8 weight, zero point w_zp) → Cast →
    Mul(x_scale · w_scale) → Add(bias), as onnxruntime's quantize_dynamic writes it."""
    from onnx import TensorProto, helper, numpy_helper  # optional heavy module

    rng = np.random.default_rng(3)
    w = rng.integers(-100, 100, size=(k, n)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(w_zp, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.02, np.float32), "w_scale"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "w_scale"], ["s"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zp"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "s"], ["y0"]),
             helper.make_node("Add", ["y0", "bias"], ["y"])]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    path.write_bytes(model.SerializeToString())


@pytest.mark.parametrize(("w_zp", "shift", "m", "tcm"), [(0, 0.0, 24, []), (3, 1.5, 24, []),
                                                      (3, -0.5, 96, SMALL_TCM)])
def test_matmul_integer_chain_is_tiled_and_exact(tmp_path, capsys, w_zp, shift, m, tcm):
    """Zero points on both sides: the weight's re-centered offline, the activation's (0 for
    an all-positive input) as the run-time column term. A tensor larger than a TCM bank
    (96 × 48 fp32 on 8 KiB banks) takes the three-phase path: partial extremes from
    several PEs, then the parameters, then the quantize blocks."""
    model = tmp_path / "dyn.onnx"
    _dynamic_model(model, w_zp, m)
    x = (np.random.default_rng(5).standard_normal((1, m, 48)) + shift).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    _, bundle = _run(tmp_path, capsys, str(model), "--inputs", str(tmp_path / "in.npz"), *tcm)
    ops = _opcodes(bundle)
    assert "TE_LAYER_OP" not in ops and "VE_LAYER_OP" not in ops
    assert ops.count("VE_QPARAMS_TILE") == 1 and ops.count("VE_ZPCORR_TILE") >= 1
    assert "TE_GEMM_TILE" in ops
    reduces = ops.count("VE_REDUCE_TILE")
    assert reduces == 2 if not tcm else reduces > 2  # one block, or several


@pytest.mark.parametrize("topology", ["small", "base"])
def test_quantized_zoo_models_have_no_whole_layer_quantized_ops(topology):
    """bert_dynamic: no TE_LAYER_OP and none of its quantization chain whole; the static
    QDQ models: no whole transposes, adds, muls or QDQs around attention."""
    whole = frozenset({"MATMUL_INTEGER", "DYNAMIC_QUANTIZE", "QDQ", "TRANSPOSE", "ADD", "MUL",
                       "MATMUL", "GEMM"})
    for model in ("bert_dynamic", "bert_qdq_static", "gpt2_qdq_static"):
        g, _ = load_model(ZOO / f"{model}.onnx")
        state, _ = compile_graph(g, load_topology(topology))
        census = layer_op_census(state)
        assert census.of(whole) == 0, (model, census.by_op)
        assert not any(oc == "TE_LAYER_OP" for oc, _ in census.by_op), (model, census.by_op)


def test_bert_dynamic_runs_tiled(tmp_path, capsys):
    _, bundle = _run(tmp_path, capsys, str(ZOO / "bert_dynamic.onnx"), "--inputs",
                     str(ZOO / "bert_dynamic.inputs.npz"))
    census = layer_op_census_of_bundle(bundle)
    assert census.by_opcode.get("TE_LAYER_OP", 0) == 0
    assert not [x for x in census.layers
                if x.startswith(("dynamic_quantize", "matmul_integer", "mul"))]
    assert census.share < 0.02  # was 8.9% (12 TE_LAYER_OP, 39 VE_LAYER_OP)


def test_kv16_cache_is_int16_and_blocked_attention_exact(tmp_path, capsys):
    """kv: 16 stores the cache as int16 and the TE reads int16 K / V (not fp16), also
    when the attention is blocked along the KV sequence."""
    q = tmp_path / "kv16.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 16}\n")
    _, bundle = _run(tmp_path, capsys, "llama", "--qconfig", str(q), "--kv-len", "600",
                     *SMALL_TCM)
    cmdq = json.loads((bundle / "cmdq.json").read_text())["cmdq"]
    ops = [e["opcode"] for e in unfused(cmdq)]
    assert "TE_LAYER_OP" not in ops and "VE_SOFTMAX_BLOCK_TILE" in ops
    kv_gemms = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE" and e.get("int16")]
    assert kv_gemms and all(e["qbits_weight"] == 16 for e in kv_gemms)
    mem = (bundle / "memory.json").read_text()
    assert '"int16"' in mem


def test_kv16_prefill_attention_is_tiled(tmp_path, capsys):
    q = tmp_path / "kv16.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 16}\n")
    _, bundle = _run(tmp_path, capsys, "llama", "--qconfig", str(q))
    assert "TE_LAYER_OP" not in _opcodes(bundle)


def _broadcast_model(path: Path) -> None:
    """scores [1, 4, 8, 8] · scalar + mask [1, 1, 8, 8], then softmax."""
    from onnx import TensorProto, helper, numpy_helper  # optional heavy module

    inits = [numpy_helper.from_array(np.array(0.125, np.float32), "c")]
    nodes = [helper.make_node("Mul", ["s", "c"], ["m"]),
             helper.make_node("Add", ["m", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "bc", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 4, 8, 8]),
                      helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    path.write_bytes(model.SerializeToString())


def test_scalar_and_leading_broadcast_operands_are_tiled(tmp_path, capsys):
    model = tmp_path / "bc.onnx"
    _broadcast_model(model)
    rng = np.random.default_rng(1)
    mask = np.where(np.tril(np.ones((8, 8))) > 0, 0, -1e4).astype(np.float32)[None, None]
    np.savez(tmp_path / "in.npz", s=rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
             mask=mask)
    _, bundle = _run(tmp_path, capsys, str(model), "--inputs", str(tmp_path / "in.npz"),
                     "--topology", "small")
    ops = _opcodes(bundle)
    assert "VE_LAYER_OP" not in ops
    assert "VE_MUL_TILE" in ops and "VE_ADD_TILE" in ops
