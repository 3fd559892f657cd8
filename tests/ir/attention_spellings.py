"""Attention written the ways exporters write it, as small onnx.helper graphs.

`build(name)` returns (model, feeds): Q / K / V projections are graph inputs
(B, S, H·D) / (B, T, Hkv·D), so the graph is only the attention core in the spelling
`name` (see SPELLINGS). Used by tests/ir/test_attention_dataflow.py against
onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

B, S, H, D = 2, 5, 4, 8
F = TensorProto.FLOAT


class G:
    """A tiny graph builder: nodes, constant initializers, inputs, feeds."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)
        self.k = 0

    def inp(self, name: str, shape: list[int], dtype=np.float32) -> str:  # noqa: ANN001
        self.inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))
        if dtype == np.bool_:
            self.feeds[name] = self.rng.random(shape) > 0.3
        else:
            self.feeds[name] = self.rng.standard_normal(shape).astype(dtype)
        return name

    def const(self, a: np.ndarray) -> str:
        self.k += 1
        name = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def op(self, op: str, ins: list[str], **attrs) -> str:  # noqa: ANN003
        self.k += 1
        out = f"t{self.k}"
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64))])

    def model(self, out: str, shape: list[int]) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "attn", self.inputs,
                              [helper.make_tensor_value_info(out, F, shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 9
        return onnx.shape_inference.infer_shapes(m)


def _heads(g: G, x: str, h: int, t: int, perm: list[int]) -> str:
    return g.op("Transpose", [g.reshape(x, [B, t, h, D])], perm=perm)


def _qkv(g: G, hkv: int = H, t: int = S) -> tuple[str, str, str]:
    return (g.inp("q", [B, S, H * D]), g.inp("k", [B, t, hkv * D]),
            g.inp("v", [B, t, hkv * D]))


def _out(g: G, y: str) -> onnx.ModelProto:
    """(B, H, S, D) attention output back to (B, S, H·D)."""
    return g.model(g.reshape(g.op("Transpose", [y], perm=[0, 2, 1, 3]), [B, S, H * D]), [B, S, H * D])


def _causal(g: G, t: int = S) -> str:
    m = np.triu(np.full((S, t), -1e9, np.float32), 1 + t - S)
    return g.const(m.reshape(1, 1, S, t))


def _core(g: G, q: str, kt: str, v: str, scores_fn=None) -> str:  # noqa: ANN001
    s = g.op("MatMul", [q, kt])
    if scores_fn is not None:
        s = scores_fn(s)
    return g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])


def _standard(g: G, scores_fn=None, q_fn=None) -> onnx.ModelProto:  # noqa: ANN001
    q, k, v = _qkv(g)
    if q_fn is not None:
        q = q_fn(q)
    y = _core(g, _heads(g, q, H, S, [0, 2, 1, 3]), _heads(g, k, H, S, [0, 2, 3, 1]),
              _heads(g, v, H, S, [0, 2, 1, 3]), scores_fn)
    return _out(g, y)


def scale_on_scores_mul(g: G) -> onnx.ModelProto:
    return _standard(g, lambda s: g.op("Mul", [s, g.const(np.float32(D ** -0.5))]))


def scale_on_scores_div(g: G) -> onnx.ModelProto:
    return _standard(g, lambda s: g.op("Div", [s, g.const(np.float32(D ** 0.5))]))


def scale_on_q(g: G) -> onnx.ModelProto:
    return _standard(g, None, lambda q: g.op("Mul", [g.const(np.float32(D ** -0.5)), q]))


def scale_on_q_and_k(g: G) -> onnx.ModelProto:
    q, k, v = _qkv(g)
    c = g.const(np.float32(D ** -0.25))
    qh = g.op("Mul", [_heads(g, q, H, S, [0, 2, 1, 3]), c])
    kt = g.op("Mul", [_heads(g, k, H, S, [0, 2, 3, 1]), c])
    return _out(g, _core(g, qh, kt, _heads(g, v, H, S, [0, 2, 1, 3])))


def no_scale(g: G) -> onnx.ModelProto:
    return _standard(g)


def additive_masks(g: G) -> onnx.ModelProto:
    pad = g.inp("pad", [B, 1, 1, S])
    return _standard(g, lambda s: g.op("Add", [g.op("Add", [
        g.op("Mul", [s, g.const(np.float32(D ** -0.5))]), _causal(g)]), pad]))


def bool_mask(g: G) -> onnx.ModelProto:
    m = g.inp("mask", [B, 1, S, S], np.bool_)
    g.feeds["mask"][..., 0] = True  # every row attends somewhere
    return _standard(g, lambda s: g.op("Where", [m, s, g.const(np.float32(-np.inf))]))


def soft_cap(g: G) -> onnx.ModelProto:
    c = g.const(np.float32(2.0))

    def f(s: str) -> str:
        s = g.op("Mul", [s, g.const(np.float32(D ** -0.5))])
        s = g.op("Mul", [g.op("Tanh", [g.op("Div", [s, c])]), c])
        return g.op("Add", [s, _causal(g)])

    return _standard(g, f)


def alibi_heads_merged(g: G) -> onnx.ModelProto:
    """BLOOM: (B·H, S, D) batches, baddbmm-style ALiBi bias (B·H, 1, T), then (B, H, S, T)."""
    q, k, v = _qkv(g)
    qh = g.reshape(_heads(g, q, H, S, [0, 2, 1, 3]), [B * H, S, D])
    kt = g.op("Transpose", [g.reshape(_heads(g, k, H, S, [0, 2, 1, 3]), [B * H, S, D])],
              perm=[0, 2, 1])
    vh = _heads(g, v, H, S, [0, 2, 1, 3])
    alibi = g.const(np.arange(S, dtype=np.float32)[None, None, :]
                     * -np.linspace(0.1, 0.5, B * H, dtype=np.float32)[:, None, None])
    s = g.op("MatMul", [qh, kt])
    s = g.op("Add", [g.op("Mul", [s, g.const(np.float32(D ** -0.5))]), alibi])
    s = g.op("Add", [g.reshape(s, [B, H, S, S]), _causal(g)])
    return _out(g, g.op("MatMul", [g.op("Softmax", [s], axis=-1), vh]))


def gqa_expand(g: G) -> onnx.ModelProto:
    """Llama: K / V with 2 heads, Unsqueeze → Expand → Reshape to 4 heads."""
    q, k, v = _qkv(g, hkv=2)

    def rep(x: str) -> str:
        x = _heads(g, x, 2, S, [0, 2, 1, 3])
        x = g.op("Expand", [g.reshape(x, [B, 2, 1, S, D]),
                            g.const(np.array([B, 2, 2, S, D], np.int64))])
        return g.reshape(x, [B, H, S, D])

    kt = g.op("Transpose", [rep(k)], perm=[0, 1, 3, 2])
    return _out(g, _core(g, _heads(g, q, H, S, [0, 2, 1, 3]), kt, rep(v),
                         lambda s: g.op("Mul", [s, g.const(np.float32(D ** -0.5))])))


def mqa_broadcast(g: G) -> onnx.ModelProto:
    """Falcon: one K / V head, (B, 1, T, D), multiplied by matmul broadcasting."""
    q, k, v = _qkv(g, hkv=1)
    kt = _heads(g, k, 1, S, [0, 2, 3, 1])
    return _out(g, _core(g, _heads(g, q, H, S, [0, 2, 1, 3]), kt,
                         _heads(g, v, 1, S, [0, 2, 1, 3]),
                         lambda s: g.op("Div", [s, g.const(np.float32(D ** 0.5))])))


def einsum(g: G) -> onnx.ModelProto:
    """Einsum on (B, S, H, D) operands: the head transposes are in the equations."""
    q, k, v = (g.reshape(x, [B, S, H, D]) for x in _qkv(g))
    s = g.op("Einsum", [q, k], equation="bqhd,bkhd->bhqk")
    s = g.op("Mul", [s, g.const(np.float32(D ** -0.5))])
    y = g.op("Einsum", [g.op("Softmax", [s], axis=-1), g.op(
        "Transpose", [v], perm=[0, 2, 1, 3])], equation="bhqk,bhkd->bhqd")
    return _out(g, y)


def transposes_other_order(g: G) -> onnx.ModelProto:
    """Kᵀ by two transposes ((0, 2, 1, 3) then (0, 1, 3, 2)); V by (2, 0, 1, 3) then back."""
    q, k, v = _qkv(g)
    kt = g.op("Transpose", [_heads(g, k, H, S, [0, 2, 1, 3])], perm=[0, 1, 3, 2])
    vh = g.op("Transpose", [_heads(g, v, H, S, [2, 0, 1, 3])], perm=[1, 0, 2, 3])
    return _out(g, _core(g, _heads(g, q, H, S, [0, 2, 1, 3]), kt, vh,
                         lambda s: g.op("Mul", [s, g.const(np.float32(D ** -0.5))])))


def kv_cache_concat(g: G) -> onnx.ModelProto:
    """Decode-style: past K / V (B, H, P, D) inputs concatenated with the new ones."""
    past = 3
    q, k, v = _qkv(g)
    pk, pv = g.inp("past_k", [B, H, past, D]), g.inp("past_v", [B, H, past, D])
    kk = g.op("Concat", [pk, _heads(g, k, H, S, [0, 2, 1, 3])], axis=2)
    vv = g.op("Concat", [pv, _heads(g, v, H, S, [0, 2, 1, 3])], axis=2)
    kt = g.op("Transpose", [kk], perm=[0, 1, 3, 2])
    return _out(g, _core(g, _heads(g, q, H, S, [0, 2, 1, 3]), kt, vv,
                         lambda s: g.op("Add", [g.op("Mul", [s, g.const(
                             np.float32(D ** -0.5))]), _causal(g, past + S)])))


SPELLINGS = {f.__name__: f for f in (
    scale_on_scores_mul, scale_on_scores_div, scale_on_q, scale_on_q_and_k, no_scale,
    additive_masks, bool_mask, soft_cap, alibi_heads_merged, gqa_expand, mqa_broadcast,
    einsum, transposes_other_order, kv_cache_concat)}


def build(name: str, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model of spelling `name` and random feeds for it."""
    g = G(seed)
    return SPELLINGS[name](g), g.feeds


def batched_matmul(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Not attention: a broadcast batched MatMul of two activations (2, 3, 8, 16) ·
    (3, 16, 12), then Relu."""
    g = G(seed)
    a, b = g.inp("a", [2, 3, 8, 16]), g.inp("b", [3, 16, 12])
    return g.model(g.op("Relu", [g.op("MatMul", [a, b])]), [2, 3, 8, 12]), g.feeds
