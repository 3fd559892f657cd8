"""Hand-built single-op and small-pattern ONNX graphs for importer tests.

Every builder returns an ``onnx.ModelProto`` with static shapes, ``ir_version=9`` (so
onnxruntime 1.31 loads it) and opset 18, except where the op needs a newer one (int4
blocked DequantizeLinear: opset 21).  Weights are initializers drawn from a fixed-seed
``numpy.random.default_rng``.

``build_all()`` returns ``{name: model}``; ``BAD`` names the deliberately invalid models
(they fail ``onnx.checker.check_model(full_check=True)`` and onnxruntime), and
``UNSUPPORTED`` names valid models that use an op the kernbench importer is not expected
to handle.  ``random_inputs(model)`` makes a feed dict for a model's graph inputs.

Used from tests by path, e.g.::

    spec = importlib.util.spec_from_file_location("micro", TESTS / "models" / "micro.py")
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 9
OPSET = 18
SEED = 0

FLOAT = TensorProto.FLOAT

BAD = frozenset({"shape_mismatch"})
UNSUPPORTED = frozenset({"unsupported_nms"})


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _rng(salt: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + salt)


def _vi(name: str, elem_type: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _weights(shape: tuple[int, ...], salt: int, scale: float = 0.1) -> np.ndarray:
    return (_rng(salt).standard_normal(shape) * scale).astype(np.float32)


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[TensorProto] = (),
    opset: int = OPSET,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="kernbench-tests-micro",
    )
    return model


def _quant_params(array: np.ndarray, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 scale (float32) and zero point (int8), per tensor or along ``axis``."""
    if axis is None:
        amax = np.abs(array).max()
        scale = np.float32(max(amax, 1e-6) / 127.0)
        return np.array(scale, dtype=np.float32), np.array(0, dtype=np.int8)
    reduce = tuple(i for i in range(array.ndim) if i != axis)
    amax = np.abs(array).max(axis=reduce)
    scale = (np.maximum(amax, 1e-6) / 127.0).astype(np.float32)
    return scale, np.zeros_like(scale, dtype=np.int8)


def _quantize(array: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    if axis is not None:
        shape = [1] * array.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
    return np.clip(np.round(array / scale), -128, 127).astype(np.int8)


# ---------------------------------------------------------------------------
# float single ops
# ---------------------------------------------------------------------------


def matmul() -> onnx.ModelProto:
    """Y[2,8,32] = X[2,8,16] @ W[16,32] (W an initializer)."""
    return _model(
        "matmul",
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [_vi("X", FLOAT, [2, 8, 16])],
        [_vi("Y", FLOAT, [2, 8, 32])],
        [_init("W", _weights((16, 32), 1))],
    )


def matmul_two_inputs() -> onnx.ModelProto:
    """Y[2,4,8,8] = A[2,4,8,16] @ B[2,4,16,8] (both runtime inputs, like Q @ K^T)."""
    return _model(
        "matmul_two_inputs",
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        [_vi("A", FLOAT, [2, 4, 8, 16]), _vi("B", FLOAT, [2, 4, 16, 8])],
        [_vi("Y", FLOAT, [2, 4, 8, 8])],
    )


def gemm() -> onnx.ModelProto:
    """Y[4,32] = X[4,16] @ W[32,16]^T + C[32] (transB=1, with bias)."""
    return _model(
        "gemm",
        [helper.make_node("Gemm", ["X", "W", "C"], ["Y"], alpha=1.0, beta=1.0, transB=1)],
        [_vi("X", FLOAT, [4, 16])],
        [_vi("Y", FLOAT, [4, 32])],
        [_init("W", _weights((32, 16), 2)), _init("C", _weights((32,), 3))],
    )


def _binary(op: str) -> onnx.ModelProto:
    """A[2,3,4] <op> B[3,1] -- both runtime inputs, numpy broadcasting."""
    return _model(
        f"{op.lower()}_broadcast",
        [helper.make_node(op, ["A", "B"], ["Y"])],
        [_vi("A", FLOAT, [2, 3, 4]), _vi("B", FLOAT, [3, 1])],
        [_vi("Y", FLOAT, [2, 3, 4])],
    )


def add_broadcast() -> onnx.ModelProto:
    return _binary("Add")


def mul_broadcast() -> onnx.ModelProto:
    return _binary("Mul")


def sub_broadcast() -> onnx.ModelProto:
    return _binary("Sub")


def div_broadcast() -> onnx.ModelProto:
    """A[2,3,4] / D[4]; the divisor is an initializer kept away from zero."""
    div = _rng(4).uniform(0.5, 2.0, size=(4,)).astype(np.float32)
    return _model(
        "div_broadcast",
        [helper.make_node("Div", ["A", "D"], ["Y"])],
        [_vi("A", FLOAT, [2, 3, 4])],
        [_vi("Y", FLOAT, [2, 3, 4])],
        [_init("D", div)],
    )


def softmax() -> onnx.ModelProto:
    return _model(
        "softmax",
        [helper.make_node("Softmax", ["X"], ["Y"], axis=-1)],
        [_vi("X", FLOAT, [2, 4, 8])],
        [_vi("Y", FLOAT, [2, 4, 8])],
    )


def layer_normalization() -> onnx.ModelProto:
    return _model(
        "layer_normalization",
        [
            helper.make_node(
                "LayerNormalization", ["X", "gamma", "beta"], ["Y"], axis=-1, epsilon=1e-5
            )
        ],
        [_vi("X", FLOAT, [2, 8, 32])],
        [_vi("Y", FLOAT, [2, 8, 32])],
        [_init("gamma", 1.0 + _weights((32,), 5)), _init("beta", _weights((32,), 6))],
    )


def conv2d() -> onnx.ModelProto:
    """Y[1,4,8,8] = Conv(X[1,3,8,8], W[4,3,3,3], B[4]), pads 1, stride 1."""
    return _model(
        "conv2d",
        [
            helper.make_node(
                "Conv",
                ["X", "W", "B"],
                ["Y"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[1, 1],
                dilations=[1, 1],
                group=1,
            )
        ],
        [_vi("X", FLOAT, [1, 3, 8, 8])],
        [_vi("Y", FLOAT, [1, 4, 8, 8])],
        [_init("W", _weights((4, 3, 3, 3), 7)), _init("B", _weights((4,), 8))],
    )


def reshape_transpose() -> onnx.ModelProto:
    """[2,16,64] -> Reshape [2,16,4,16] -> Transpose(0,2,1,3) -> [2,4,16,16] (head split)."""
    return _model(
        "reshape_transpose",
        [
            helper.make_node("Reshape", ["X", "shape"], ["R"]),
            helper.make_node("Transpose", ["R"], ["Y"], perm=[0, 2, 1, 3]),
        ],
        [_vi("X", FLOAT, [2, 16, 64])],
        [_vi("Y", FLOAT, [2, 4, 16, 16])],
        [_init("shape", np.array([2, 16, 4, 16], dtype=np.int64))],
    )


# ---------------------------------------------------------------------------
# decomposed patterns (as emitted by torch.onnx dynamo export)
# ---------------------------------------------------------------------------


def rmsnorm_decomposed() -> onnx.ModelProto:
    """Y = X * Reciprocal(Sqrt(ReduceMean(Pow(X, 2), -1) + eps)) * weight."""
    nodes = [
        helper.make_node("Pow", ["X", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Reciprocal", ["rms"], ["inv"]),
        helper.make_node("Mul", ["X", "inv"], ["normed"]),
        helper.make_node("Mul", ["normed", "weight"], ["Y"]),
    ]
    inits = [
        _init("two", np.array(2.0, dtype=np.float32)),
        _init("axes", np.array([-1], dtype=np.int64)),
        _init("eps", np.array(1e-6, dtype=np.float32)),
        _init("weight", 1.0 + _weights((64,), 9)),
    ]
    return _model(
        "rmsnorm_decomposed",
        nodes,
        [_vi("X", FLOAT, [1, 16, 64])],
        [_vi("Y", FLOAT, [1, 16, 64])],
        inits,
    )


def gelu_erf() -> onnx.ModelProto:
    """Y = (X * (Erf(X / sqrt(2)) + 1)) * 0.5 -- BERT's exact GELU."""
    nodes = [
        helper.make_node("Div", ["X", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["X", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["Y"]),
    ]
    inits = [
        _init("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32)),
        _init("one", np.array(1.0, dtype=np.float32)),
        _init("half", np.array(0.5, dtype=np.float32)),
    ]
    return _model(
        "gelu_erf", nodes, [_vi("X", FLOAT, [2, 8, 128])], [_vi("Y", FLOAT, [2, 8, 128])], inits
    )


def gelu_tanh() -> onnx.ModelProto:
    """Y = 0.5 * X * (1 + Tanh(sqrt(2/pi) * (X + 0.044715 * X^3))) -- GPT-2's GELU."""
    nodes = [
        helper.make_node("Pow", ["X", "three"], ["x3"]),
        helper.make_node("Mul", ["x3", "c"], ["cx3"]),
        helper.make_node("Add", ["X", "cx3"], ["inner"]),
        helper.make_node("Mul", ["inner", "k"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["X", "t1"], ["xt"]),
        helper.make_node("Mul", ["xt", "half"], ["Y"]),
    ]
    inits = [
        _init("three", np.array(3.0, dtype=np.float32)),
        _init("c", np.array(0.044715, dtype=np.float32)),
        _init("k", np.array(math.sqrt(2.0 / math.pi), dtype=np.float32)),
        _init("one", np.array(1.0, dtype=np.float32)),
        _init("half", np.array(0.5, dtype=np.float32)),
    ]
    return _model(
        "gelu_tanh", nodes, [_vi("X", FLOAT, [2, 8, 128])], [_vi("Y", FLOAT, [2, 8, 128])], inits
    )


def silu() -> onnx.ModelProto:
    """Y = X * Sigmoid(X)."""
    nodes = [
        helper.make_node("Sigmoid", ["X"], ["s"]),
        helper.make_node("Mul", ["X", "s"], ["Y"]),
    ]
    return _model("silu", nodes, [_vi("X", FLOAT, [2, 8, 128])], [_vi("Y", FLOAT, [2, 8, 128])])


# ---------------------------------------------------------------------------
# quantized
# ---------------------------------------------------------------------------


def _qdq_matmul(per_axis: bool) -> onnx.ModelProto:
    """X -Q-> int8 -DQ-> @ DQ(W int8) -> Y, activation per tensor, weight per tensor/axis 1."""
    name = "qdq_matmul_per_axis" if per_axis else "qdq_matmul_per_tensor"
    w = _weights((32, 16), 10 + per_axis)
    w_axis = 1 if per_axis else None
    w_scale, w_zp = _quant_params(w, w_axis)
    w_q = _quantize(w, w_scale, w_axis)
    dq_attrs = {"axis": 1} if per_axis else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["X", "x_scale", "x_zp"], ["X_q"]),
        helper.make_node("DequantizeLinear", ["X_q", "x_scale", "x_zp"], ["X_dq"]),
        helper.make_node("DequantizeLinear", ["W_q", "w_scale", "w_zp"], ["W_dq"], **dq_attrs),
        helper.make_node("MatMul", ["X_dq", "W_dq"], ["Y"]),
    ]
    inits = [
        _init("x_scale", np.array(4.0 / 127.0, dtype=np.float32)),
        _init("x_zp", np.array(0, dtype=np.int8)),
        _init("W_q", w_q),
        _init("w_scale", w_scale),
        _init("w_zp", w_zp),
    ]
    return _model(name, nodes, [_vi("X", FLOAT, [4, 32])], [_vi("Y", FLOAT, [4, 16])], inits)


def qdq_matmul_per_tensor() -> onnx.ModelProto:
    return _qdq_matmul(per_axis=False)


def qdq_matmul_per_axis() -> onnx.ModelProto:
    return _qdq_matmul(per_axis=True)


def matmul_integer() -> onnx.ModelProto:
    """Y int32[4,16] = MatMulInteger(A uint8[4,32], B int8[32,16] init, a_zp=128, b_zp=0)."""
    rng = _rng(12)
    b = rng.integers(-127, 128, size=(32, 16), dtype=np.int8)
    nodes = [helper.make_node("MatMulInteger", ["A", "B", "a_zp", "b_zp"], ["Y"])]
    inits = [
        _init("B", b),
        _init("a_zp", np.array(128, dtype=np.uint8)),
        _init("b_zp", np.array(0, dtype=np.int8)),
    ]
    return _model(
        "matmul_integer",
        nodes,
        [_vi("A", TensorProto.UINT8, [4, 32])],
        [_vi("Y", TensorProto.INT32, [4, 16])],
        inits,
    )


def dynamic_quant_matmul() -> onnx.ModelProto:
    """quantize_dynamic's pattern: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul scales."""
    w = _weights((32, 16), 13)
    w_scale, w_zp = _quant_params(w)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["X"], ["X_q", "x_scale", "x_zp"]),
        helper.make_node("MatMulInteger", ["X_q", "W_q", "x_zp", "w_zp"], ["acc"]),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=FLOAT),
        helper.make_node("Mul", ["acc_f", "scale"], ["Y"]),
    ]
    inits = [_init("W_q", _quantize(w, w_scale)), _init("w_scale", w_scale), _init("w_zp", w_zp)]
    return _model(
        "dynamic_quant_matmul", nodes, [_vi("X", FLOAT, [4, 32])], [_vi("Y", FLOAT, [4, 16])], inits
    )


def qlinear_matmul() -> onnx.ModelProto:
    """QOperator pattern: Q(X) -> QLinearMatMul(int8 x int8 -> int8) -> DQ."""
    w = _weights((32, 16), 14)
    w_scale, w_zp = _quant_params(w)
    nodes = [
        helper.make_node("QuantizeLinear", ["X", "x_scale", "x_zp"], ["X_q"]),
        helper.make_node(
            "QLinearMatMul",
            ["X_q", "x_scale", "x_zp", "W_q", "w_scale", "w_zp", "y_scale", "y_zp"],
            ["Y_q"],
        ),
        helper.make_node("DequantizeLinear", ["Y_q", "y_scale", "y_zp"], ["Y"]),
    ]
    inits = [
        _init("x_scale", np.array(4.0 / 127.0, dtype=np.float32)),
        _init("x_zp", np.array(0, dtype=np.int8)),
        _init("W_q", _quantize(w, w_scale)),
        _init("w_scale", w_scale),
        _init("w_zp", w_zp),
        _init("y_scale", np.array(8.0 / 127.0, dtype=np.float32)),
        _init("y_zp", np.array(0, dtype=np.int8)),
    ]
    return _model(
        "qlinear_matmul", nodes, [_vi("X", FLOAT, [4, 32])], [_vi("Y", FLOAT, [4, 16])], inits
    )


def int4_blocked_matmul() -> onnx.ModelProto:
    """Y = X[4,64] @ DequantizeLinear(W int4[64,16], scales[2,16], axis=0, block_size=32).

    Symmetric (no zero point), the form MatMulNBitsQuantizer(quant_format=QDQ) writes.
    Opset 21.
    """
    k, n, block = 64, 16, 32
    w = _weights((k, n), 15)
    blocks = w.reshape(k // block, block, n)
    scales = (np.maximum(np.abs(blocks).max(axis=1), 1e-6) / 7.0).astype(np.float32)  # [2, 16]
    w_q = np.clip(np.round(blocks / scales[:, None, :]), -8, 7).astype(np.int8).reshape(k, n)
    w_init = helper.make_tensor("W_q", TensorProto.INT4, [k, n], w_q.flatten().tolist())
    nodes = [
        helper.make_node(
            "DequantizeLinear", ["W_q", "w_scale"], ["W_dq"], axis=0, block_size=block
        ),
        helper.make_node("MatMul", ["X", "W_dq"], ["Y"]),
    ]
    return _model(
        "int4_blocked_matmul",
        nodes,
        [_vi("X", FLOAT, [4, k])],
        [_vi("Y", FLOAT, [4, n])],
        [w_init, _init("w_scale", scales)],
        opset=21,
    )


# ---------------------------------------------------------------------------
# deliberately unsupported / invalid
# ---------------------------------------------------------------------------


def unsupported_nms() -> onnx.ModelProto:
    """Valid ONNX with an op (NonMaxSuppression) an NPU importer should reject cleanly."""
    nodes = [
        helper.make_node(
            "NonMaxSuppression",
            ["boxes", "scores", "max_out", "iou", "score_thr"],
            ["selected"],
            center_point_box=0,
        )
    ]
    inits = [
        _init("max_out", np.array([3], dtype=np.int64)),
        _init("iou", np.array([0.5], dtype=np.float32)),
        _init("score_thr", np.array([0.0], dtype=np.float32)),
    ]
    return _model(
        "unsupported_nms",
        nodes,
        [_vi("boxes", FLOAT, [1, 8, 4]), _vi("scores", FLOAT, [1, 1, 8])],
        [_vi("selected", TensorProto.INT64, ["num_selected", 3])],
        inits,
    )


def shape_mismatch() -> onnx.ModelProto:
    """Invalid: MatMul of X[2,8] with W[16,4] -- inner dimensions disagree."""
    return _model(
        "shape_mismatch",
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [_vi("X", FLOAT, [2, 8])],
        [_vi("Y", FLOAT, [2, 4])],
        [_init("W", _weights((16, 4), 16))],
    )


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "matmul": matmul,
    "matmul_two_inputs": matmul_two_inputs,
    "gemm": gemm,
    "add_broadcast": add_broadcast,
    "mul_broadcast": mul_broadcast,
    "sub_broadcast": sub_broadcast,
    "div_broadcast": div_broadcast,
    "softmax": softmax,
    "layer_normalization": layer_normalization,
    "rmsnorm_decomposed": rmsnorm_decomposed,
    "gelu_erf": gelu_erf,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
    "conv2d": conv2d,
    "reshape_transpose": reshape_transpose,
    "qdq_matmul_per_tensor": qdq_matmul_per_tensor,
    "qdq_matmul_per_axis": qdq_matmul_per_axis,
    "matmul_integer": matmul_integer,
    "dynamic_quant_matmul": dynamic_quant_matmul,
    "qlinear_matmul": qlinear_matmul,
    "int4_blocked_matmul": int4_blocked_matmul,
    "unsupported_nms": unsupported_nms,
    "shape_mismatch": shape_mismatch,
}


def build_all() -> dict[str, onnx.ModelProto]:
    """Every micro model by name (including the ``BAD`` and ``UNSUPPORTED`` ones)."""
    return {name: build() for name, build in BUILDERS.items()}


_INT_RANGES = {
    TensorProto.UINT8: (0, 256, np.uint8),
    TensorProto.INT8: (-128, 128, np.int8),
    TensorProto.INT32: (-100, 100, np.int32),
    TensorProto.INT64: (0, 100, np.int64),
}


def random_inputs(model: onnx.ModelProto, seed: int = SEED) -> dict[str, np.ndarray]:
    """Feeds for every graph input that is not an initializer (float: uniform [-2, 2))."""
    rng = np.random.default_rng(seed)
    init_names = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        ttype = vi.type.tensor_type
        shape = [d.dim_value for d in ttype.shape.dim]
        if ttype.elem_type in _INT_RANGES:
            lo, hi, dtype = _INT_RANGES[ttype.elem_type]
            feeds[vi.name] = rng.integers(lo, hi, size=shape, dtype=dtype)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
            feeds[vi.name] = rng.uniform(-2.0, 2.0, size=shape).astype(dtype)
    return feeds
