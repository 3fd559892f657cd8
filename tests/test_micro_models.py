"""The hand-built micro ONNX models in tests/models/micro.py are valid and run in onnxruntime."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

_MICRO_PATH = Path(__file__).parent / "models" / "micro.py"
_spec = importlib.util.spec_from_file_location("kernbench_tests_micro", _MICRO_PATH)
micro = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(micro)

GOOD = [name for name in micro.BUILDERS if name not in micro.BAD]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_build_all_covers_registry():
    models = micro.build_all()
    assert set(models) == set(micro.BUILDERS)
    assert set(models) >= micro.BAD
    assert set(models) >= micro.UNSUPPORTED
    for model in models.values():
        assert isinstance(model, onnx.ModelProto)
        assert model.ir_version == micro.IR_VERSION


@pytest.mark.parametrize("name", GOOD)
def test_micro_model_valid_and_runs(name):
    model = micro.BUILDERS[name]()
    onnx.checker.check_model(model, full_check=True)
    feeds = micro.random_inputs(model)
    outputs = _session(model).run(None, feeds)
    for value, vi in zip(outputs, model.graph.output, strict=True):
        dims = vi.type.tensor_type.shape.dim
        assert value.ndim == len(dims)
        for got, dim in zip(value.shape, dims, strict=True):
            if dim.HasField("dim_value"):
                assert got == dim.dim_value
        if value.dtype.kind == "f":
            assert np.isfinite(value).all()


@pytest.mark.parametrize("name", sorted(micro.BAD))
def test_bad_micro_model_rejected(name):
    model = micro.BUILDERS[name]()
    with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError)):
        onnx.checker.check_model(model, full_check=True)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime raises its own Fail/InvalidGraph
        _session(model)


def test_gelu_and_rmsnorm_patterns_match_numpy():
    x = micro.random_inputs(micro.gelu_erf())["X"].astype(np.float64)
    (y,) = _session(micro.gelu_erf()).run(None, {"X": x.astype(np.float32)})
    from math import erf

    ref = 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))
    np.testing.assert_allclose(y, ref, atol=1e-5)

    (y_tanh,) = _session(micro.gelu_tanh()).run(None, {"X": x.astype(np.float32)})
    np.testing.assert_allclose(y_tanh, ref, atol=2e-3)  # tanh approximation

    model = micro.rmsnorm_decomposed()
    xr = micro.random_inputs(model)["X"]
    (yr,) = _session(model).run(None, {"X": xr})
    weight = onnx.numpy_helper.to_array(
        next(t for t in model.graph.initializer if t.name == "weight")
    )
    ref_r = (
        xr / np.sqrt(np.mean(xr.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6) * weight
    )
    np.testing.assert_allclose(yr, ref_r, rtol=1e-5, atol=1e-5)


def test_int4_blocked_matmul_dequantizes_per_block():
    model = micro.int4_blocked_matmul()
    assert model.opset_import[0].version == 21
    w_q = next(t for t in model.graph.initializer if t.name == "W_q")
    assert w_q.data_type == onnx.TensorProto.INT4
    x = np.eye(4, 64, dtype=np.float32)
    (y,) = _session(model).run(None, {"X": x})
    w = onnx.numpy_helper.to_array(w_q).astype(np.float32)
    scales = onnx.numpy_helper.to_array(
        next(t for t in model.graph.initializer if t.name == "w_scale")
    )
    w_dq = w * np.repeat(scales, 32, axis=0)
    np.testing.assert_allclose(y, x @ w_dq, rtol=1e-6, atol=1e-6)
