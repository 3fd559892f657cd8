"""--batch / --seq-len / --kv-len bind the symbolic dims of ONNX models (exports with
past_key_values inputs) and build batched built-ins; batched decode verifies against
onnxruntime end to end."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main


def _dynamic_decode_model(path):  # noqa: ANN001, ANN202
    """Embedding → K projection → heads → Concat(past, new) = present; logits head.
    Dims: batch, seq (new tokens), past (cached)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((50, 32)) * 0.1).astype(np.float32),
                                     "emb"),
             numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.1).astype(np.float32),
                                     "wk"),
             numpy_helper.from_array((rng.standard_normal((32, 50)) * 0.1).astype(np.float32),
                                     "wl"),
             numpy_helper.from_array(np.array([0, 0, 2, 16], np.int64), "heads")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"], axis=0),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Reshape", ["k", "heads"], ["k4"]),
             helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 1, 3]),
             helper.make_node("Concat", ["past_key_values.0.key", "kt"], ["present.0.key"],
                              axis=2),
             helper.make_node("MatMul", ["x", "wl"], ["logits"])]
    g = helper.make_graph(
        nodes, "dyn",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "seq"]),
         helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                       ["batch_size", 2, "past_sequence_length", 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "seq", 50]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT,
                                       ["batch_size", 2, "total", 16])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, str(path))


def test_onnx_dynamic_dims_are_bound_and_verified(tmp_path, capsys):
    src = tmp_path / "dyn.onnx"
    _dynamic_decode_model(src)
    out = tmp_path / "out"
    rc = main(["run", str(src), "--batch", "3", "--seq-len", "2", "--kv-len", "5", "-o",
               str(out), "--verify", "--no-trace", "--no-report", "--keep-bundle"])
    err = capsys.readouterr().err
    assert rc in (0, None), err
    assert "input_ids[0] 'batch_size' = 3 (batch)" in err
    assert "input_ids[1] 'seq' = 2 (seq)" in err
    assert "past_key_values.0.key[2] 'past_sequence_length' = 5 (kv)" in err
    bound = onnx.load(str(out / "bundle" / "model.onnx"))  # the bound model the bundle carries
    dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in bound.graph.input}
    assert dims == {"input_ids": [3, 2], "past_key_values.0.key": [3, 2, 5, 16]}
    ver = json.loads((out / "verification.json").read_text())
    assert ver["ok"] is True


def test_fixed_shapes_and_unknown_dims_refused(tmp_path, capsys):
    src = tmp_path / "dyn.onnx"
    _dynamic_decode_model(src)
    m = onnx.load(str(src))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "mystery"
    bad = tmp_path / "bad.onnx"
    m.graph.input[0].name = "tokens"
    for n in m.graph.node:
        n.input[:] = ["tokens" if i == "input_ids" else i for i in n.input]
    onnx.save(m, str(bad))
    assert main(["run", str(bad), "--seq-len", "4", "-o", str(tmp_path / "o")]) == 2
    e = capsys.readouterr().err.strip().splitlines()
    assert len(e) == 1 and "'mystery'" in e[0] and "input 'tokens'" in e[0]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_batched_decode_of_builtins_verifies(tmp_path, name):
    rc = main(["run", name, "--batch", "3", "--kv-len", "6", "-o", str(tmp_path),
               "--verify", "--no-trace", "--no-report"])
    assert rc in (0, None)
    ver = json.loads((tmp_path / "verification.json").read_text())
    assert ver["ok"] is True
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["total_ns"] > 0
