"""A decode step exported with symbolic batch / sequence / past dims whose shapes are
computed at run time (Shape, Gather, Unsqueeze, Concat, Range, GatherND, Slice, Equal,
Where, Expand): bound with --batch / --seq-len / --kv-len, every shape computation is
constant, so the importer folds it and infers the shapes that follow (node_shapes.py)
instead of refusing a tensor without a static shape."""

from __future__ import annotations

import json
from collections import Counter

import dynamic_decode
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from kernbench.cli import main
from kernbench.host.models import ShapeOptions
from kernbench.host.onnx_dims import bind_onnx_dims
from kernbench.ir.onnx_import import import_onnx

BATCH, SEQ, PAST = 2, 5, 64


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("dyn")
    path = d / "decode.onnx"
    onnx.save(dynamic_decode.build(), str(path))
    np.savez(d / "decode.inputs.npz", **dynamic_decode.inputs(BATCH, SEQ, PAST))
    return path


def test_the_model_computes_its_shapes_at_run_time(model_path):
    ops = Counter(n.op_type for n in onnx.load(str(model_path)).graph.node)
    for op in ("Shape", "Gather", "Unsqueeze", "Concat", "Range", "GatherND", "Slice",
               "Equal", "Where", "Expand"):
        assert ops[op], op
    assert all(d.HasField("dim_param") for d in
               onnx.load(str(model_path)).graph.input[0].type.tensor_type.shape.dim)


def test_bound_dims_import_with_static_shapes(model_path, tmp_path):
    bound, _ = bind_onnx_dims(model_path, ShapeOptions(BATCH, SEQ, PAST), tmp_path)
    g = import_onnx(bound)
    assert all(all(isinstance(d, int) and d >= 0 for d in t.shape) for t in g.tensors.values())
    feeds = dynamic_decode.inputs(BATCH, SEQ, PAST)
    ref = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    for name, value in zip(names, ref.run(None, feeds), strict=True):
        assert g.tensors[name].shape == list(value.shape)
    ops = Counter(n.op_type for n in g.nodes)
    assert ops["ATTENTION"] == 1 and ops["KV_UPDATE"] == 2


def test_run_binds_folds_and_verifies_against_onnxruntime(model_path, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(model_path), "--batch", str(BATCH), "--seq-len", str(SEQ),
                 "--kv-len", str(PAST), "--inputs", str(model_path.with_suffix(".inputs.npz")),
                 "--verify", "--out", str(out), "--no-trace", "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"]
    ort_checks = [c for c in v["checks"] if c["reference"] == "onnxruntime"]
    assert {c["output"] for c in ort_checks} == {"logits", "present_key", "present_value"}


def test_unbound_symbolic_dims_are_still_refused(model_path, tmp_path, capsys):
    assert main(["import", str(model_path), "--output", str(tmp_path / "ir.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no static shape" in err[0]
    assert not (tmp_path / "ir.json").exists()
