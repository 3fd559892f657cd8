"""Invalid inputs: exit code 2 and one clear line on stderr, never a traceback."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from ir_helpers import model_path
from onnx import TensorProto, helper

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.ir import validate_ir_file


def _run(capsys, argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    return err


def _save(m: onnx.ModelProto, path) -> str:
    m.ir_version = 9
    onnx.save(m, str(path))
    return str(path)


def _mm_model(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_truncated_file(tmp_path, capsys):
    data = model_path("gpt2").read_bytes()
    p = tmp_path / "trunc.onnx"
    p.write_bytes(data[: len(data) // 3])
    err = _run(capsys, ["import", str(p), "-o", str(tmp_path / "ir.json")])
    assert "trunc.onnx" in err and "ONNX" in err


def test_failing_checker(tmp_path, capsys):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])
    m = _mm_model([helper.make_node("Add", ["X", "Z"], ["Y"])], [x], [y])
    err = _run(capsys, ["import", _save(m, tmp_path / "bad.onnx"), "-o", str(tmp_path / "o.json")])
    assert "checker" in err


def test_unsupported_ops_listed(tmp_path, capsys):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("LpNormalization", ["X"], ["A"], name="lp1"),
        helper.make_node("Relu", ["A"], ["B"], name="relu"),
        helper.make_node("LpNormalization", ["B"], ["C"], name="lp2"),
        helper.make_node("LRN", ["C"], ["Y"], name="lrn", size=3),
    ]
    m = _mm_model(nodes, [x], [y])
    err = _run(capsys, ["import", _save(m, tmp_path / "u.onnx"), "-o", str(tmp_path / "o.json")])
    assert "LpNormalization (nodes: lp1, lp2)" in err
    assert "LRN (nodes: lrn)" in err
    assert "Relu" not in err


def test_unsupported_micro_nms(tmp_path, capsys):
    import micro

    m = micro.build_all()["unsupported_nms"]
    err = _run(capsys, ["import", _save(m, tmp_path / "nms.onnx"), "-o", str(tmp_path / "o.json")])
    assert "NonMaxSuppression" in err


def test_external_data_outside_folder(tmp_path, capsys):
    sub = tmp_path / "model"
    sub.mkdir()
    secret = tmp_path / "secret.bin"
    w = np.ones((4, 4), np.float32)
    secret.write_bytes(w.tobytes())
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])
    m = _mm_model([helper.make_node("MatMul", ["X", "W"], ["Y"])], [x], [y], [t])
    p = sub / "m.onnx"
    m.ir_version = 9
    p.write_bytes(m.SerializeToString())
    err = _run(capsys, ["import", str(p), "-o", str(tmp_path / "o.json")])
    assert "leaves the model's folder" in err


def test_onnx_shape_mismatch(tmp_path, capsys):
    import micro

    m = micro.build_all()["shape_mismatch"]
    err = _run(capsys, ["import", _save(m, tmp_path / "sm.onnx"), "-o", str(tmp_path / "o.json")])
    assert "sm.onnx" in err


def test_opset_out_of_range(tmp_path, capsys):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
    newest = onnx.defs.onnx_opset_version()
    m = _mm_model([helper.make_node("Relu", ["X"], ["Y"])], [x], [y], opset=newest + 1)
    err = _run(capsys, ["import", _save(m, tmp_path / "o.onnx"), "-o", str(tmp_path / "o.json")])
    assert f"opset {newest + 1} not supported" in err


def test_ir_json_shape_mismatch(tmp_path):
    main(["import", str(model_path("llama")), "-o", str(tmp_path / "ir.json")])
    d = json.loads((tmp_path / "ir.json").read_text())
    gemm = next(n for n in d["graph"]["nodes"] if n["op_type"] == "GEMM")
    d["tensors"][gemm["outputs"][0]]["shape"][-1] += 1
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(InputError, match="shape mismatch") as ei:
        validate_ir_file(tmp_path / "bad.json", tmp_path / "weights.npz")
    assert gemm["id"] in str(ei.value)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d["graph"]["nodes"][0].update(qbits_weight=3), "qbits_weight"),
        (lambda d: d["graph"].update(nodes={}), "graph.nodes|nodes"),
        (lambda d: d["graph"]["nodes"].reverse(), "later layer"),
        (lambda d: d["graph"]["nodes"][1]["inputs"].append("nope"), "not in the tensor table"),
        (lambda d: next(t for t in d["tensors"].values() if not t["const"]).update(
            dtype="banana"), "unknown dtype 'banana'"),
    ],
)
def test_ir_json_invalid(tmp_path, mutate, match):
    main(["import", str(model_path("gpt2")), "-o", str(tmp_path / "ir.json")])
    d = json.loads((tmp_path / "ir.json").read_text())
    mutate(d)
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(InputError, match=match):
        validate_ir_file(tmp_path / "bad.json", tmp_path / "weights.npz")


def test_bad_qconfig(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text("default: {weight: 8, activaton: 8}\n")
    err = _run(capsys, ["import", str(model_path("gpt2")), "-o", str(tmp_path / "o.json"),
                        "--qconfig", str(q)])  # fmt: skip
    assert "activaton" in err and "unknown key" in err


def test_validate_refuses_an_unknown_dtype(tmp_path, capsys):
    """`kernbench validate` refuses what compile would: exit 2, one line naming the tensor
    and the field."""
    main(["import", str(model_path("gpt2")), "-o", str(tmp_path / "ir.json")])
    d = json.loads((tmp_path / "ir.json").read_text())
    tid = next(k for k, t in d["tensors"].items() if not t["const"])
    d["tensors"][tid]["dtype"] = "banana"
    (tmp_path / "bad.json").write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"tensor {tid}" in err[0] and "'dtype'" in err[0] \
        and "banana" in err[0]


def test_unknown_quant_keys_are_kept(tmp_path):
    """IR spec §12 (ADR-0820): a `quant` key this version does not know is kept and written
    back, like an unknown key of any IR object, instead of refusing the file."""
    main(["import", str(model_path("llama_qdq")), "-o", str(tmp_path / "ir.json")])
    d = json.loads((tmp_path / "ir.json").read_text())
    tid = next(k for k, t in d["tensors"].items() if t.get("quant"))
    d["tensors"][tid]["quant"]["encoding"] = "future"
    (tmp_path / "ext.json").write_text(json.dumps(d))
    g = validate_ir_file(tmp_path / "ext.json", tmp_path / "weights.npz")
    assert g.tensors[tid].quant.model_extra == {"encoding": "future"}
    g.save(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["tensors"][tid]["quant"]["encoding"] == "future"
