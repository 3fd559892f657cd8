"""CumSum, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool and Clip: one-node
models through the importer + interpreter against onnx.reference.ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from kernbench.errors import InputError
from kernbench.ir.backend import KernbenchBackend
from kernbench.ir.onnx_import import import_model_proto

RNG = np.random.default_rng(7)


def _model(op: str, x: np.ndarray, inits: dict[str, np.ndarray] | None = None,
           opset: int = 18, **attrs):  # noqa: ANN003, ANN202
    inits = inits or {}
    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    xi = helper.make_tensor_value_info("X", et, list(x.shape))
    yi = helper.make_tensor_value_info("Y", et, None)
    ins = ["X"] + [k if v is not None else "" for k, v in inits.items()]
    node = helper.make_node(op, ins, ["Y"], **attrs)
    init = [helper.make_tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape),
                               v.reshape(-1).tolist()) for k, v in inits.items() if v is not None]
    g = helper.make_graph([node], "g", [xi], [yi], initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(m, x: np.ndarray, exact: bool = False) -> None:  # noqa: ANN001
    (want,) = ReferenceEvaluator(m).run(None, {"X": x})
    # the graph output's shape is the reference's (the importer wants a typed output)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info(
        "Y", helper.np_dtype_to_tensor_dtype(want.dtype), list(want.shape)))
    (got,) = KernbenchBackend.run_model(m, [x])
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(exclusive: int, reverse: int, axis: int):
    x = RNG.integers(-5, 6, (3, 4, 5)).astype(np.float32)
    m = _model("CumSum", x, {"axis": np.array(axis, np.int64)}, exclusive=exclusive,
               reverse=reverse)
    _check(m, x, exact=True)


def test_cumsum_int64():
    x = RNG.integers(0, 3, (2, 7)).astype(np.int64)
    _check(_model("CumSum", x, {"axis": np.array(1, np.int32)}), x, exact=True)


POOLS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 0], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
]


@pytest.mark.parametrize("attrs", POOLS)
def test_maxpool(attrs: dict):
    x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
    _check(_model("MaxPool", x, **attrs), x, exact=True)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", [a for a in POOLS if "dilations" not in a])
def test_averagepool(attrs: dict, count_include_pad: int):
    x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
    _check(_model("AveragePool", x, count_include_pad=count_include_pad, **attrs), x)


def test_maxpool_1d_and_3d():
    x1 = RNG.standard_normal((1, 2, 11)).astype(np.float32)
    _check(_model("MaxPool", x1, kernel_shape=[3], strides=[2], pads=[1, 1]), x1, exact=True)
    x3 = RNG.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    _check(_model("AveragePool", x3, kernel_shape=[2, 2, 3], strides=[1, 2, 2]), x3)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op: str):
    x = RNG.standard_normal((2, 5, 7, 6)).astype(np.float32)
    _check(_model(op, x), x)


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-0.5, None), (None, 0.25), (None, None)])
def test_clip_inputs(lo, hi):  # noqa: ANN001
    x = (RNG.standard_normal((3, 8)) * 4).astype(np.float32)
    inits = {"lo": None if lo is None else np.array(lo, np.float32),
             "hi": None if hi is None else np.array(hi, np.float32)}
    if hi is None:
        inits.pop("hi")
        if lo is None:
            inits.pop("lo")
    _check(_model("Clip", x, inits), x, exact=True)


def test_clip_attributes_opset6_relu6():
    x = (RNG.standard_normal((2, 10)) * 5).astype(np.float32)
    _check(_model("Clip", x, opset=6, min=0.0, max=6.0), x, exact=True)


def test_clip_int32():
    x = RNG.integers(-20, 20, (4, 5)).astype(np.int32)
    _check(_model("Clip", x, {"lo": np.array(-3, np.int32)}), x, exact=True)


def test_runtime_cumsum_axis_is_one_clear_error():
    x = helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(np.dtype("float32")),
                                      [2, 3])
    ax = helper.make_tensor_value_info("A", helper.np_dtype_to_tensor_dtype(np.dtype("int64")),
                                       [])
    y = helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(np.dtype("float32")),
                                      [2, 3])
    g = helper.make_graph([helper.make_node("CumSum", ["X", "A"], ["Y"], name="cs")], "g",
                          [x, ax], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(InputError, match="non-constant CumSum axis"):
        import_model_proto(m)
