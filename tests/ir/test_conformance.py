"""onnx's node test cases for every claimed op: the pass / fail list must equal the one
documented in docs/onnx-support.md (failures are listed there with a reason)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from kernbench.ir.backend import KernbenchBackend
from kernbench.ir.conformance import run_cases

DOC = Path(__file__).resolve().parents[2] / "docs" / "onnx-support.md"


def test_documented_pass_fail_list():
    m = re.search(r"<!-- conformance-data\n(.*?)\n-->", DOC.read_text(), re.S)
    assert m, "docs/onnx-support.md has no conformance data; run scripts/onnx_conformance.py"
    doc = json.loads(m.group(1))
    results = run_cases()
    failing = sorted(r.name for r in results if not r.ok)
    passing = sorted(r.name for r in results if r.ok)
    assert failing == doc["failing"], "re-run scripts/onnx_conformance.py and review"
    assert passing == doc["passing"]
    assert len(passing) > len(failing)


def test_backend_runs_a_model():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Sigmoid", ["X"], ["Y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    a = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    (out,) = KernbenchBackend.run_model(m, [a])
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-a)), rtol=1e-6)
    assert KernbenchBackend.supports_device("CPU")
