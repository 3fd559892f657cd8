"""bf16 exports: zoo models converted to bf16 at test time (scripts/float_convert.py; no
onnxruntime outputs are committed because its CPU provider lacks bf16 kernels for most
ops) compile to the tiles of their fp32 source, and `run --verify` passes exactly against
the IR interpreter; the outputs stay close to the fp32 model's onnxruntime outputs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kernbench.cli import main
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.topology import load_topology

ZOO = Path(__file__).parent / "zoo"
_spec = importlib.util.spec_from_file_location(
    "kernbench_float_convert", Path(__file__).parents[1] / "scripts" / "float_convert.py")
assert _spec is not None and _spec.loader is not None
fc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fc)


def _bf16(model: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{model}_bf16.onnx"
    onnx.save(fc.convert_float(onnx.load(ZOO / f"{model}.onnx"), "bf16"), path)
    return path


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_bf16_export_verifies_exactly(tmp_path, capsys, model):
    path = _bf16(model, tmp_path)
    out = tmp_path / "out"
    # the token inputs are integers: the fp32 model's inputs serve the bf16 one as they are
    code = main(["run", str(path), "--topology", "small", "--out", str(out), "--verify",
                 "--inputs", str(ZOO / f"{model}.inputs.npz"), "--no-trace", "--no-report"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "onnxruntime cannot run" in err  # said, not silently skipped
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and [c["reference"] for c in v["checks"]] == ["interpreter"]
    assert v["checks"][0]["max_abs_err"] == 0.0
    got = np.load(out / "outputs.npz")
    want = np.load(ZOO / f"{model}.outputs.npz")
    for name in want.files:
        a, e = got[name].astype(np.float64), want[name].astype(np.float64)
        cos = float((a * e).sum() / np.linalg.norm(a) / np.linalg.norm(e))
        assert cos >= 0.999, (name, cos)  # bf16 storage + W8A8 vs fp32 onnxruntime


@pytest.mark.parametrize("model", ["llama", "bert"])
def test_bf16_export_compiles_like_its_fp32_source(tmp_path, model):
    topo = load_topology("small")
    censuses = []
    for path in (_bf16(model, tmp_path), ZOO / f"{model}.onnx"):
        g, _ = load_model(path)
        state, _ = compile_graph(g, topo)
        censuses.append(layer_op_census(state))
    half, full = censuses
    assert half.te_shaped == 0 and half.by_op == full.by_op, half.by_op


@pytest.mark.parametrize("to, big", [("fp16", 65504.0), ("bf16", 3.3895313892515355e38)])
def test_convert_float_types_and_clamps(to, big):
    """Initializers, Constant value_float, Cast(to=FLOAT) and graph io change type; an
    fp32 extreme (a mask's -3.4e38) is clamped to the target's largest finite value."""
    code = fc.TARGETS[to][0]
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value_float=-3.4e38),
         helper.make_node("Add", ["x", "w"], ["s"]),
         helper.make_node("Add", ["s", "c"], ["t"]),
         helper.make_node("Cast", ["t"], ["y"], to=TensorProto.FLOAT)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.5, -2.0])])
    m = fc.convert_float(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), to)
    onnx.checker.check_model(m, full_check=True)
    mg = m.graph
    assert mg.input[0].type.tensor_type.elem_type == code
    assert mg.output[0].type.tensor_type.elem_type == code
    assert mg.initializer[0].data_type == code
    assert mg.node[3].attribute[0].i == code
    c = mg.node[0].attribute[0].t
    assert c.data_type == code
    raw = np.frombuffer(c.raw_data, np.float16 if to == "fp16" else ml_dtypes.bfloat16)
    assert float(raw[0]) == -big
    with pytest.raises(ValueError, match="target"):
        fc.convert_float(m, "fp8")
