"""Models of every opset from 7 on import: old signatures are converted, newer opsets are
relabelled or converted down, and the result runs through the whole stack and matches
onnxruntime on the ORIGINAL model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.ir.onnx_import import import_model_proto


def _old_style(opset: int) -> onnx.ModelProto:
    """x[2,8] → MatMul W → Split (attribute) → ReduceMean (axes attribute) on one half,
    Squeeze/Unsqueeze with axes attributes, Clip → Add: the signatures of opsets < 13."""
    rng = np.random.default_rng(opset)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Split", ["h"], ["a", "b"], axis=1,
                         **({"split": [4, 4]} if opset < 13 else {})),
        helper.make_node("ReduceMean", ["a"], ["m"], axes=[1], keepdims=1),
        helper.make_node("Add", ["b", "m"], ["s"]),
        helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0]) if opset < 13 else
        helper.make_node("Unsqueeze", ["s", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u"], ["q"], axes=[0]) if opset < 13 else
        helper.make_node("Squeeze", ["u", "ax"], ["q"]),
        helper.make_node("Relu", ["q"], ["y"]),
    ]
    inits = [w]
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax"))
    g = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize("opset", [7, 9, 11, 13, 16])
def test_old_opsets_convert_and_verify(tmp_path, capsys, opset):
    model = _old_style(opset)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"old{opset}.onnx"
    onnx.save(model, path)
    g = import_model_proto(model)
    assert g.metadata["source_opset"] == opset and g.metadata["opset_version"] == 18
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    q = tmp_path / "q.yaml"
    q.write_text("default: {weight: fp32, activation: fp32, kv: fp32}\n")
    code = main(["run", str(path), "--verify", "--inputs", str(tmp_path / "in.npz"),
                 "--qconfig", str(q), "--out", str(tmp_path / "out"), "--no-trace"])
    assert code == 0, capsys.readouterr().err[-1500:]


def test_newer_opset_is_relabelled_when_nothing_changed():
    m = onnx.load("tests/models/gpt2.onnx")
    newest = onnx.defs.onnx_opset_version()
    m24 = onnx.version_converter.convert_version(m, min(24, newest))
    g = import_model_proto(m24)
    assert g.metadata["opset_version"] == 23
    assert g.metadata["source_opset"] == min(24, newest)


def test_unknown_opset_refused_in_one_line():
    model = _old_style(13)
    model.opset_import[0].version = 99
    with pytest.raises(InputError, match="opset 99 not supported"):
        import_model_proto(model)


def test_opset_0_refused():
    model = _old_style(7)
    model.opset_import[0].version = 0
    with pytest.raises(InputError, match="opset 0 not supported"):
        import_model_proto(model)
