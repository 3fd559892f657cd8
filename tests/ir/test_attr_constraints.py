"""An op's attributes are checked against each other and against its tensors' ranks (the
`constraints` hook declared next to the attributes, `kernbench.ir.ops.rules`): an axis
within the rank, a permutation of the axes, window lengths that agree with the spatial
axes, a group that divides the channels, ... The verifier refuses a node that breaks one
in one line naming the node and the attribute, before any shape rule indexes with it."""

from __future__ import annotations

import pytest

from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.verify import verify


def _graph(op: str, attributes: dict, ins: dict[str, tuple[list[int], str]],
           outs: dict[str, tuple[list[int], str]]) -> Graph:
    n = LayerIR(id="n", op_type=op, inputs=list(ins), outputs=list(outs),
                attributes=attributes)
    g = Graph(nodes=[n], inputs=list(ins), outputs=list(outs)[:1])
    for tid, (shape, dt) in {**ins, **outs}.items():
        g.tensors[tid] = TensorIR(id=tid, shape=shape, dtype=dt, role="activation",
                                  producer="n" if tid in outs else None,
                                  consumers=["n"] if tid in ins else [])
    return g


F = "fp32"


def _conv(attrs: dict, x=(1, 4, 8, 8), w=(6, 2, 3, 3), y=(1, 6, 6, 6)) -> Graph:
    base = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 2}
    return _graph("CONV", {**base, **attrs}, {"x": (list(x), F), "w": (list(w), F)},
                  {"y": (list(y), F)})


def _pool(attrs: dict) -> Graph:
    base = {"mode": "max", "kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
            "dilations": [1, 1], "ceil_mode": False, "count_include_pad": False}
    return _graph("POOL", {**base, **attrs}, {"x": ([1, 3, 8, 8], F)},
                  {"y": ([1, 3, 4, 4], F)})


def _attention(attrs: dict, mask: tuple[list[int], str] | None = None) -> Graph:
    base = {"num_heads": 4, "num_kv_heads": 2, "head_dim": 8, "scale": 0.5}
    ins = {"q": ([1, 4, 3, 8], F), "k": ([1, 2, 3, 8], F), "v": ([1, 2, 3, 8], F)}
    if mask is not None:
        ins["m"] = mask
    return _graph("ATTENTION", {**base, **attrs}, ins, {"y": ([1, 4, 3, 8], F)})


ACCEPTED = [
    _graph("SOFTMAX", {"axis": -1}, {"x": ([2, 3], F)}, {"y": ([2, 3], F)}),
    _graph("TRANSPOSE", {"perm": [1, 0, 2]}, {"x": ([2, 3, 4], F)}, {"y": ([3, 2, 4], F)}),
    _conv({}),
    _conv({"kernel_shape": [3, 3]}),
    _pool({}),
    _attention({}),
    _attention({"mask": "bool"}, ([1, 1, 3, 3], "bool")),
    _attention({"mask": "additive"}, ([1, 1, 3, 3], F)),
]


@pytest.mark.parametrize("g", ACCEPTED, ids=lambda g: g.nodes[0].op_type)
def test_agreeing_attributes_pass(g):
    verify(g)


REFUSED = [
    (_graph("SOFTMAX", {"axis": 2}, {"x": ([2, 3], F)}, {"y": ([2, 3], F)}),
     "attributes.axis", "axis 2 is not an axis of a rank-2 tensor (expected -2 to 1)"),
    (_graph("CONCAT", {"axis": -3}, {"a": ([1, 2], F), "b": ([1, 2], F)},
            {"y": ([2, 2], F)}),
     "attributes.axis", "axis -3 is not an axis of a rank-2 tensor (expected -2 to 1)"),
    (_graph("KV_UPDATE", {"axis": 4}, {"p": ([1, 2, 3, 4], F), "n": ([1, 2, 1, 4], F)},
            {"y": ([1, 2, 4, 4], F)}),
     "attributes.axis", "axis 4 is not an axis of a rank-4 tensor (expected -4 to 3)"),
    (_graph("TRANSPOSE", {"perm": [0, 0, 1]}, {"x": ([2, 3, 4], F)}, {"y": ([2, 2, 3], F)}),
     "attributes.perm", "perm [0, 0, 1] is not a permutation of 0..2 (the input's rank is 3)"),
    (_graph("TRANSPOSE", {"perm": [1, 0]}, {"x": ([2, 3, 4], F)}, {"y": ([3, 2, 4], F)}),
     "attributes.perm", "perm [1, 0] is not a permutation of 0..2 (the input's rank is 3)"),
    (_graph("REDUCE", {"op": "sum", "axes": [1, -1], "keepdims": True}, {"x": ([2, 3], F)},
            {"y": ([2, 1], F)}),
     "attributes.axes", "axes [1, -1] names an axis twice"),
    (_graph("PAD", {"pads": [1, 1], "mode": "constant", "value": 0.0}, {"x": ([2, 3], F)},
            {"y": ([4, 5], F)}),
     "attributes.pads", "pads has 2 entries, expected 4 (a begin and an end per axis of a "
                        "rank-2 input)"),
    (_graph("SLICE", {"starts": [0, 0], "ends": [1], "steps": [1, 1]}, {"x": ([2, 3], F)},
            {"y": ([1, 3], F)}),
     "attributes.ends", "ends has 1 entries, expected 2 (one per start)"),
    (_graph("SPLIT", {"axis": 0, "sizes": [1, 1, 0]}, {"x": ([2, 3], F)},
            {"y0": ([1, 3], F), "y1": ([1, 3], F)}),
     "attributes.sizes", "sizes has 3 entries, expected 2 (one per output)"),
    (_conv({"strides": [1]}),
     "attributes.strides", "strides has 1 entries, expected 2 (one per spatial axis of a "
                           "rank-4 input)"),
    (_conv({"pads": [0, 0]}),
     "attributes.pads", "pads has 2 entries, expected 4 (a begin and an end per spatial "
                        "axis of a rank-4 input)"),
    (_conv({"kernel_shape": [3, 3, 3]}),
     "attributes.kernel_shape", "kernel_shape has 3 entries, expected 2 (one per spatial "
                                "axis of a rank-4 input)"),
    (_conv({"kernel_shape": [2, 2]}),
     "attributes.kernel_shape", "kernel_shape [2, 2] is not the weight's [3, 3]"),
    (_conv({"group": 3}),
     "attributes.group", "group 3 does not divide the input channels (4)"),
    (_conv({"group": 1}),
     "attributes.group", "group 1 x the weight's 2 channels per group is not the input's 4 "
                         "channels"),
    (_pool({"kernel_shape": [2]}),
     "attributes.kernel_shape", "kernel_shape has 1 entries, expected 2 (one per spatial "
                                "axis of a rank-4 input)"),
    (_pool({"strides": [0, 2]}), "attributes.strides", "strides [0, 2] has a value below 1"),
    (_graph("GROUP_NORM", {"groups": 4, "eps": 1e-5, "per_channel_affine": True},
            {"x": ([1, 6, 2], F), "s": ([6], F), "b": ([6], F)}, {"y": ([1, 6, 2], F)}),
     "attributes.groups", "groups 4 does not divide the channels (6)"),
    (_graph("DEPTH_TO_SPACE", {"blocksize": 2, "mode": "DCR"}, {"x": ([1, 6, 2, 2], F)},
            {"y": ([1, 1, 4, 4], F)}),
     "attributes.blocksize", "blocksize 2: its square does not divide the channels (6)"),
    (_attention({"num_kv_heads": 3}),
     "attributes.num_kv_heads", "num_kv_heads 3 does not divide num_heads (4)"),
    (_attention({"mask": "additive"}),
     "attributes.mask", "mask 'additive' with no mask input"),
    (_attention({}, ([1, 1, 3, 3], F)),
     "attributes.mask", "mask 'none' with a mask input"),
    (_attention({"mask": "additive"}, ([1, 1, 3, 3], "bool")),
     "attributes.mask", "mask 'additive' with a bool mask input"),
    (_attention({"kv_first": 2}),
     "attributes.kv_first", "kv_first is set without kv_parts"),
    (_graph("QKV_PROJ", {"num_heads": 2, "head_dim": 4},
            {"x": ([3, 8], F), "wq": ([8, 8], F), "wk": ([8, 8], F), "wv": ([8, 8], F)},
            {"q": ([3, 8], F), "k": ([3, 8], F), "v": ([3, 8], F)}),
     "attributes.num_kv_heads", "num_kv_heads is missing: num_heads, head_dim given without it"),
    (_graph("QUANTIZE", {"dtype": "int8"}, {"x": ([4], F), "s": ([], F)},
            {"y": ([4], "uint8")}),
     "attributes.dtype", "dtype int8 but the output is uint8"),
    (_graph("QUANTIZE", {"dtype": "int8", "block_size": 32}, {"x": ([4], F), "s": ([], F)},
            {"y": ([4], "int8")}),
     "attributes.block_size", "block_size 32 without an axis to block along"),
    (_graph("ELEMENTWISE", {"op": "cast", "to": "fp16"}, {"x": ([4], F)},
            {"y": ([4], "int32")}),
     "attributes.to", "to 'fp16' but the output is int32"),
    (_graph("EINSUM", {"equation": "ij,jk->ik"}, {"a": ([2, 3], F)}, {"y": ([2, 3], F)}),
     "attributes.equation", "equation has 2 entries, expected 1 (one term per input)"),
    (_graph("ONE_HOT", {"axis": 3}, {"i": ([2, 3], "int64"), "d": ([], "int64"),
                                     "v": ([2], F)}, {"y": ([2, 3, 5], F)}),
     "attributes.axis", "axis 3 is not an axis of a rank-3 tensor (expected -3 to 2)"),
    (_graph("MOE_ROUTE", {"n_experts": 3, "counts": [2, 2]}, {"i": ([2, 2], "int64")},
            {"r0": ([2], "int64"), "r1": ([2], "int64"), "t0": ([2], "int64"),
             "t1": ([2], "int64")}),
     "attributes.counts", "counts has 2 entries, expected 3 (one per expert, n_experts)"),
]


@pytest.mark.parametrize("g, field, reason", REFUSED,
                         ids=[f"{g.nodes[0].op_type}-{f}" for g, f, _ in REFUSED])
def test_disagreeing_attributes_are_one_line(g, field, reason):
    with pytest.raises(InputError) as ei:
        verify(g, file="g.json")
    e = ei.value
    assert str(e) == f"g.json: node n: field '{field}': {reason}"
