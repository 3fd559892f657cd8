"""A one-layer decode-step attention block in the style of a dynamo export with dynamic
shapes, built with onnx.helper: symbolic batch / sequence / past dims, and every shape
computed at run time (Shape, Gather, Unsqueeze, Concat, Add, Range, Slice, Equal, Where,
Expand, GatherND). Bound with --batch / --seq-len / --kv-len, each shape computation has
constant inputs only."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, HEAD_DIM, VOCAB = 2, 8, 32
EMBED = HEADS * HEAD_DIM


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def build() -> onnx.ModelProto:
    """The model (opset 18, ir_version 9); inputs input_ids [batch, seq], attention_mask
    [batch, past + seq], past_key / past_value [batch, H, past, D]; outputs logits
    [batch, seq, E] and present_key / present_value [batch, H, past + seq, D]."""
    rng = np.random.default_rng(0)
    f = np.float32
    inits = [
        numpy_helper.from_array(rng.standard_normal((VOCAB, EMBED)).astype(f), "emb"),
        *(numpy_helper.from_array((rng.standard_normal((EMBED, EMBED)) / 4).astype(f), w)
          for w in ("wq", "wk", "wv", "wo")),
        _i64("i0", 0), _i64("i1", 1), _i64("i2", 2), _i64("one", 1), _i64("zero", 0),
        _i64("heads", [HEADS]), _i64("hdim", [HEAD_DIM]), _i64("embed", [EMBED]),
        _i64("c1", [1]), _i64("c0", [0]), _i64("ax1", [1]), _i64("neg1", [-1]),
        _i64("ones4", [1, 1, 1, 1]),
        numpy_helper.from_array(np.array(HEAD_DIM ** -0.5, f), "scale"),
        numpy_helper.from_array(np.array(-1e4, f), "neg_big"),
        numpy_helper.from_array(np.array(0.0, f), "fzero"),
    ]
    N = helper.make_node
    nodes = [
        N("Gather", ["emb", "input_ids"], ["x"]),
        # dims from shapes: b, s (of x), p (of past_key), total = p + s
        N("Shape", ["x"], ["shp_x"]),
        N("Gather", ["shp_x", "i0"], ["b"]),
        N("Gather", ["shp_x", "i1"], ["s"]),
        N("Shape", ["past_key"], ["shp_pk"]),
        N("Gather", ["shp_pk", "i2"], ["p"]),
        N("Add", ["p", "s"], ["total"]),
        N("Unsqueeze", ["b", "c0"], ["b1"]),
        N("Unsqueeze", ["s", "c0"], ["s1"]),
        N("Unsqueeze", ["total", "c0"], ["t1"]),
        N("Concat", ["b1", "s1", "heads", "hdim"], ["split_shape"], axis=0),
        N("Concat", ["b1", "s1", "embed"], ["merge_shape"], axis=0),
    ]
    for w, nm in (("wq", "q"), ("wk", "k"), ("wv", "v")):
        nodes += [N("MatMul", ["x", w], [f"{nm}_lin"]),
                  N("Reshape", [f"{nm}_lin", "split_shape"], [f"{nm}_4d"]),
                  N("Transpose", [f"{nm}_4d"], [f"{nm}_h"], perm=[0, 2, 1, 3])]
    nodes += [
        N("Concat", ["past_key", "k_h"], ["present_key"], axis=2),
        N("Concat", ["past_value", "v_h"], ["present_value"], axis=2),
        N("Transpose", ["present_key"], ["k_t"], perm=[0, 1, 3, 2]),
        N("MatMul", ["q_h", "k_t"], ["qk"]),
        N("Mul", ["qk", "scale"], ["scores"]),
        # causal part: query i (position p + i) sees keys 0 .. p + i
        N("Range", ["p", "total", "one"], ["q_pos"]),
        N("Range", ["zero", "total", "one"], ["k_pos"]),
        N("Unsqueeze", ["q_pos", "ax1"], ["q_col"]),
        N("LessOrEqual", ["k_pos", "q_col"], ["causal"]),           # [s, total]
        # padding part: the batch rows of the mask picked by GatherND over Range(b)
        N("Range", ["zero", "b", "one"], ["rows"]),
        N("Unsqueeze", ["rows", "ax1"], ["row_idx"]),               # [b, 1]
        N("GatherND", ["attention_mask", "row_idx"], ["mask_rows"]),  # [b, total]
        N("Slice", ["mask_rows", "c0", "t1", "ax1"], ["mask_cut"]),
        N("Cast", ["mask_cut"], ["mask_b"], to=TensorProto.BOOL),
        N("Unsqueeze", ["mask_b", "ax1"], ["mask_3d"]),
        N("Unsqueeze", ["mask_3d", "ax1"], ["mask_4d"]),            # [b, 1, 1, total]
        N("And", ["mask_4d", "causal"], ["keep"]),                  # [b, 1, s, total]
        # an Expand target the way dynamo writes it: Where(Equal(shape, -1), 1, shape)
        N("Concat", ["b1", "c1", "s1", "t1"], ["want"], axis=0),
        N("Equal", ["want", "neg1"], ["is_neg"]),
        N("Where", ["is_neg", "ones4", "want"], ["expand_to"]),
        N("Expand", ["keep", "expand_to"], ["keep_full"]),
        N("Where", ["keep_full", "fzero", "neg_big"], ["bias"]),
        N("Add", ["scores", "bias"], ["masked"]),
        N("Softmax", ["masked"], ["probs"], axis=-1),
        N("MatMul", ["probs", "present_value"], ["ctx_h"]),
        N("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3]),
        N("Reshape", ["ctx_t", "merge_shape"], ["ctx"]),
        N("MatMul", ["ctx", "wo"], ["logits"]),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "dynamic_decode",
        [vi("input_ids", TensorProto.INT64, ["batch", "sequence_length"]),
         vi("attention_mask", TensorProto.INT64, ["batch", "total_length"]),
         vi("past_key", TensorProto.FLOAT, ["batch", HEADS, "past_sequence_length", HEAD_DIM]),
         vi("past_value", TensorProto.FLOAT,
            ["batch", HEADS, "past_sequence_length", HEAD_DIM])],
        [vi("logits", TensorProto.FLOAT, ["batch", "sequence_length", EMBED]),
         vi("present_key", TensorProto.FLOAT, ["batch", HEADS, "total", HEAD_DIM]),
         vi("present_value", TensorProto.FLOAT, ["batch", HEADS, "total", HEAD_DIM])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def inputs(batch: int, seq: int, past: int) -> dict[str, np.ndarray]:
    """Random inputs for the bound dims; the last two mask positions of row 0 are padding."""
    rng = np.random.default_rng(1)
    mask = np.ones((batch, past + seq), np.int64)
    mask[0, :2] = 0
    return {
        "input_ids": rng.integers(0, VOCAB, (batch, seq)).astype(np.int64),
        "attention_mask": mask,
        "past_key": rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32),
        "past_value": rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32),
    }
