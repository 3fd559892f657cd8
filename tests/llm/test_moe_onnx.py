"""tests/models/moe.onnx (scripts/export_moe_onnx.py): a random-weight MoE block with a
TopK router and gathered experts, checked against a float64 numpy forward, and run
through the whole stack with --verify."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from kernbench.cli import main

MODELS = Path(__file__).parent.parent / "models"
MODEL = MODELS / "moe.onnx"


def _numpy_moe(x: np.ndarray, w: dict[str, np.ndarray], k: int) -> np.ndarray:
    """Token by token: the k largest router logits, softmax over them, the weighted sum
    of those experts' SiLU-gated MLPs, plus the residual (float64)."""
    x = x.astype(np.float64)
    y = x.copy()
    for t in range(x.shape[0]):
        logits = x[t] @ w["router"]
        top = np.argsort(-logits, kind="stable")[:k]
        p = np.exp(logits[top] - logits[top].max())
        p /= p.sum()
        for e, pe in zip(top, p, strict=True):
            g, u = x[t] @ w["w1"][e], x[t] @ w["w3"][e]
            y[t] += pe * ((g / (1 + np.exp(-g)) * u) @ w["w2"][e])
    return y


def test_export_is_what_onnxruntime_and_numpy_compute():
    import onnxruntime as ort

    m = onnx.load(str(MODEL))
    onnx.checker.check_model(m, full_check=True)
    ops = {n.op_type for n in m.graph.node}
    assert {"TopK", "Gather", "MatMul", "Softmax"} <= ops
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    k = int(w["k"][0])
    x = np.load(MODELS / "moe.inputs.npz")["x"]
    ref = _numpy_moe(x, w, k)
    (ort_y,) = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    np.testing.assert_allclose(ort_y, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.load(MODELS / "moe.outputs.npz")["y"], ort_y)
    # the routing is not degenerate: every expert gets tokens, and tokens differ
    top = np.argsort(-(x @ w["router"]), axis=1, kind="stable")[:, :k]
    assert len(np.unique(top)) == w["router"].shape[1]


def test_moe_onnx_verifies_through_the_stack(tmp_path, capsys):
    rc = main(["run", str(MODEL), "--verify", "--inputs", str(MODELS / "moe.inputs.npz"),
               "-o", str(tmp_path / "o"), "--no-report", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "verification: PASS" in out or "VERIFIED" in out
    v = json.loads((tmp_path / "o" / "verification.json").read_text())
    checks = {c["reference"]: c for c in v["checks"]}
    assert v["ok"] and checks["interpreter"]["max_abs_err"] == 0.0  # data pass exact
    assert checks["onnxruntime"]["ok"] and checks["onnxruntime"]["cosine"] >= 0.999
