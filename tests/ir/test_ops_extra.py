"""The ops of ir/onnx_import/lower_extra.py in one model, checked against onnxruntime
(an independent implementation) through the reference interpreter."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from kernbench.ir.backend import KernbenchBackend


def _model():
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("X", f, [2, 3, 4])
    i64 = TensorProto.INT64
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in [
        ("hs", f, [2, 3, 4]), ("pr", f, [2, 3, 4]), ("pad", f, [2, 5, 7]),
        ("tv", f, [2, 2, 4]), ("ti", i64, [2, 2, 4]), ("es", f, [2, 3, 3]),
        ("am", i64, [2, 3]), ("tile", f, [2, 6, 4]), ("mod", f, [2, 3, 4]),
        ("mean", f, [2, 3, 4])]]
    c = helper.make_tensor
    inits = [c("slope", f, [4], [0.1, 0.2, 0.3, 0.4]), c("pads", TensorProto.INT64, [6],
             [0, 1, 2, 0, 1, 1]), c("k", TensorProto.INT64, [1], [2]),
             c("reps", TensorProto.INT64, [3], [1, 2, 1]), c("d", f, [], [0.7])]
    nodes = [
        helper.make_node("HardSwish", ["X"], ["hs"]),
        helper.make_node("PRelu", ["X", "slope"], ["pr"]),
        helper.make_node("Pad", ["X", "pads"], ["pad"], mode="reflect"),
        helper.make_node("TopK", ["X", "k"], ["tv", "ti"], axis=1, largest=0),
        helper.make_node("Einsum", ["X", "X"], ["es"], equation="bij,bkj->bik"),
        helper.make_node("ArgMax", ["X"], ["am"], axis=2, keepdims=0, select_last_index=1),
        helper.make_node("Tile", ["X", "reps"], ["tile"]),
        helper.make_node("Mod", ["X", "d"], ["mod"], fmod=1),
        helper.make_node("Mean", ["X", "hs", "pr"], ["mean"]),
    ]
    g = helper.make_graph(nodes, "g", [x], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_extra_ops_match_onnxruntime():
    m = _model()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a[0, 0, :2] = 1.5  # an ArgMax tie: select_last_index must pick the later one
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"X": a})
    got = KernbenchBackend.run_model(m, [a])
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
