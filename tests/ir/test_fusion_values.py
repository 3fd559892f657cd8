"""The importer's fusions against onnxruntime: a fused graph computes what the exporter's
graph computes, and a near miss (a pattern that looks like RMSNorm or GELU but is not) is
not fused into the op it resembles. Counting fused ops (test_fusion.py) cannot tell."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from ir_helpers import ort_run
from onnx import TensorProto, helper, numpy_helper

from kernbench.ir.interpreter.core import run
from kernbench.ir.onnx_import import import_onnx

X = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32) * 2


def _save(tmp: Path, nodes: list, consts: dict[str, np.ndarray], name: str) -> Path:
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(X.shape))],
                          initializer=[numpy_helper.from_array(np.asarray(v, np.float32), k)
                                       for k, v in consts.items()])
    path = tmp / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              path)
    return path


def _rms(exp: float, axis: int) -> tuple[list, dict]:
    """x / sqrt(mean(x ** exp over axis) + eps): an RMSNorm when exp = 2 and axis = -1."""
    nodes = [helper.make_node("Pow", ["x", "e"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["r"]),
             helper.make_node("Div", ["x", "r"], ["y"])]
    return nodes, {"e": exp, "eps": 1e-5}


def _ln(mean_axis: int = -1, swap: bool = False, recip: bool = False) -> tuple[list, dict]:
    """(x - mean(x)) / sqrt(mean((x - mean)²) + eps) · w + b as torch's opset-14 export
    writes LayerNorm (or with Mul(d, d) and Reciprocal): a LayerNorm when the mean is over
    the last axis and d = x - mean."""
    sub = ["m", "x"] if swap else ["x", "m"]
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[mean_axis], keepdims=1),
             helper.make_node("Sub", sub, ["d"])]
    if recip:
        nodes += [helper.make_node("Mul", ["d", "d"], ["sq"])]
    else:
        nodes += [helper.make_node("Pow", ["d", "e"], ["sq"])]
    nodes += [helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1], keepdims=1),
              helper.make_node("Add", ["var", "eps"], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["sd"])]
    if recip:
        nodes += [helper.make_node("Reciprocal", ["sd"], ["inv"]),
                  helper.make_node("Mul", ["inv", "d"], ["n"])]
    else:
        nodes += [helper.make_node("Div", ["d", "sd"], ["n"])]
    nodes += [helper.make_node("Mul", ["w", "n"], ["nw"]),
              helper.make_node("Add", ["nw", "b"], ["y"])]
    rng = np.random.default_rng(7)
    return nodes, {"e": 2.0, "eps": 1e-5, "w": rng.standard_normal(16) + 1,
                   "b": rng.standard_normal(16)}


def _tanh_gelu(c: float) -> tuple[list, dict]:
    """0.5·x·(1 + tanh(√(2/π)·(x + c·x³))): the tanh GELU when c = 0.044715."""
    nodes = [helper.make_node("Pow", ["x", "three"], ["x3"]),
             helper.make_node("Mul", ["x3", "c"], ["cx3"]),
             helper.make_node("Add", ["x", "cx3"], ["inner"]),
             helper.make_node("Mul", ["inner", "k"], ["arg"]),
             helper.make_node("Tanh", ["arg"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["x", "t1"], ["xt"]),
             helper.make_node("Mul", ["xt", "half"], ["y"])]
    return nodes, {"three": 3.0, "c": c, "k": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5}


CASES = [  # (name, graph, the fused op it must (not) become)
    ("rms_norm", _rms(2.0, -1), "RMS_NORM", True),
    ("rms_cube", _rms(3.0, -1), "RMS_NORM", False),
    ("rms_axis0", _rms(2.0, 0), "RMS_NORM", False),
    ("layer_norm", _ln(), "LAYER_NORM", True),
    ("layer_norm_recip", _ln(recip=True), "LAYER_NORM", True),
    ("layer_norm_mean_axis0", _ln(mean_axis=0), "LAYER_NORM", False),
    ("layer_norm_mean_minus_x", _ln(swap=True), "LAYER_NORM", False),
    ("tanh_gelu", _tanh_gelu(0.044715), "GELU", True),
    ("tanh_near_gelu", _tanh_gelu(0.03), "GELU", False),
]


@pytest.mark.parametrize("name,graph,op,fused", CASES, ids=[c[0] for c in CASES])
def test_fusion_matches_onnxruntime(tmp_path, name, graph, op, fused):
    nodes, consts = graph
    path = _save(tmp_path, nodes, consts, name)
    g = import_onnx(path)
    assert (Counter(g.op_types())[op] == 1) is fused, g.op_types()
    got = run(g, {"x": X}, quantize=False)["y"]
    want = ort_run(path, {"x": X}, optimize=False)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_decomposed_layer_norm_reads_eps_and_affine_from_the_graph(tmp_path):
    nodes, consts = _ln()
    consts = dict(consts, eps=3e-4)
    g = import_onnx(_save(tmp_path, nodes, consts, "ln_eps"))
    (ln,) = [n for n in g.nodes if n.op_type == "LAYER_NORM"]
    assert math.isclose(ln.attributes["eps"], 3e-4, rel_tol=1e-6)
    assert ln.attributes["axis"] == 1
    np.testing.assert_array_equal(g.weights[ln.inputs[1]], consts["w"].astype(np.float32))
    np.testing.assert_array_equal(g.weights[ln.inputs[2]], consts["b"].astype(np.float32))
    assert Counter(g.op_types()) == Counter({"LAYER_NORM": 1})


def test_matmul_of_inner_dimension_one_is_a_mul(tmp_path):
    """Optimum's rotary frequencies, inv_freq [B, D/2, 1] @ positions [B, 1, S]: an outer
    product, imported as a broadcast MUL that computes the same floats (a MatMul of
    inner dimension 2 stays a MATMUL)."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 8, 1)).astype(np.float32)
    b = rng.standard_normal((2, 1, 6)).astype(np.float32)
    a2 = rng.standard_normal((2, 8, 2)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"]),
         helper.make_node("MatMul", ["a2", "b2"], ["y2"])], "outer",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 1, 6]),
         helper.make_tensor_value_info("b2", TensorProto.FLOAT, [2, 2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 6]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 8, 6])],
        initializer=[numpy_helper.from_array(a, "a"), numpy_helper.from_array(a2, "a2")])
    path = tmp_path / "outer.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              path)
    ir = import_onnx(path)
    assert Counter(ir.op_types()) == Counter({"MUL": 1, "MATMUL": 1})
    b2 = rng.standard_normal((2, 2, 6)).astype(np.float32)
    got = run(ir, {"b": b, "b2": b2}, quantize=False)
    want = ort_run(path, {"b": b, "b2": b2}, optimize=False)
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], a * b)


def _decompose_layer_norms(model: onnx.ModelProto) -> int:
    """Write each LayerNormalization (last axis) out as torch's opset-14 exporter does:
    ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul weight, Add bias (opset-18
    ReduceMean: the axes an input). The number rewritten."""
    nodes, inits, k = [], [], 0
    for n in model.graph.node:
        if n.op_type != "LayerNormalization":
            nodes.append(n)
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        x, w, b = n.input
        p = f"ln{k}/"
        inits += [numpy_helper.from_array(np.array(2.0, np.float32), p + "two"),
                  numpy_helper.from_array(np.array(eps, np.float32), p + "eps"),
                  numpy_helper.from_array(np.array([-1], np.int64), p + "axes")]
        nodes += [helper.make_node("ReduceMean", [x, p + "axes"], [p + "m"]),
                  helper.make_node("Sub", [x, p + "m"], [p + "d"]),
                  helper.make_node("Pow", [p + "d", p + "two"], [p + "sq"]),
                  helper.make_node("ReduceMean", [p + "sq", p + "axes"], [p + "var"]),
                  helper.make_node("Add", [p + "var", p + "eps"], [p + "ve"]),
                  helper.make_node("Sqrt", [p + "ve"], [p + "sd"]),
                  helper.make_node("Div", [p + "d", p + "sd"], [p + "n"]),
                  helper.make_node("Mul", [p + "n", w], [p + "nw"]),
                  helper.make_node("Add", [p + "nw", b], [n.output[0]])]
        k += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(inits)
    return k


def test_an_export_with_layer_norm_decomposed_compiles_as_with_layer_normalization(tmp_path):
    """The GPT-2 export with every LayerNormalization written out (what an opset-14 export
    holds) imports to the same LAYER_NORMs and runs the same program: same simulated time,
    data exact against the interpreter, onnxruntime within tolerance."""
    from kernbench.cli import main

    src = Path(__file__).resolve().parents[1] / "models" / "hf_decoders" / "gpt2_optimum.onnx"
    m = onnx.load(src)
    assert _decompose_layer_norms(m) == 5
    dec = tmp_path / "gpt2_decomposed.onnx"
    onnx.save(m, dec)
    totals = []
    for path in (src, dec):
        out = tmp_path / path.stem
        assert main(["run", str(path), "-t", "small", "--batch", "1", "--seq-len", "1",
                     "--kv-len", "16", "--verify", "--keep-bundle", "--no-trace", "--no-report",
                     "--quiet", "--out", str(out)]) == 0
        ir = json.loads((out / "bundle" / "ir.json").read_text())["graph"]["nodes"]
        ops = Counter(n["op_type"] for n in ir)
        assert ops["LAYER_NORM"] == 5 and ops["REDUCE"] == 0 and ops["RMS_NORM"] == 0, ops
        totals.append(json.loads((out / "stats.json").read_text())["total_ns"])
    assert totals[0] == totals[1]
