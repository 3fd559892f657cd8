"""The ONNX checker and shape inference run on a light copy of the model (its large
initializers as typed inputs, `onnx_import.light`): the prepared model must be, byte for
byte, what they give on the whole model."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from kernbench.errors import InputError
from kernbench.ir.onnx_import import light
from kernbench.ir.onnx_import.loader import prepare_model
from kernbench.models.builders import build_gpt2, build_llama

MODELS = Path(__file__).resolve().parents[1] / "models"
KW = {"check_type": True, "strict_mode": True, "data_prop": True}


def _whole(model: onnx.ModelProto) -> bytes:
    """What the checker and shape inference give on the whole model (the reference)."""
    onnx.checker.check_model(model, full_check=False)
    return onnx.shape_inference.infer_shapes(model, **KW).SerializeToString(deterministic=True)


@pytest.mark.parametrize("name", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_prepared_model_equals_inference_on_the_whole_model(name):
    model = onnx.load(str(MODELS / name))
    ref = onnx.ModelProto()
    ref.CopyFrom(model)
    got = prepare_model(model)
    # prepare_model adds the source opset to the metadata before checking: the same here
    want_model = onnx.ModelProto()
    want_model.CopyFrom(ref)
    want_model.metadata_props.extend(got.metadata_props[len(ref.metadata_props):])
    assert got.SerializeToString(deterministic=True) == _whole(want_model)


@pytest.mark.parametrize("build", [lambda: build_gpt2(n_layer=1, d=128, heads=4, seq=8),
                                   lambda: build_llama(n_layer=1, d=128, heads=4, kv_heads=2,
                                                       seq=8, kv_len=8)])
def test_large_initializers_are_left_out_and_put_back(build):
    model = build()
    moved = [t.name for t in model.graph.initializer if light.movable(t)]
    assert moved, "the case must have initializers above LIGHT_ELEMENTS"
    lm = light.light_model(model)
    assert {t.name for t in lm.graph.initializer}.isdisjoint(moved)
    assert set(moved) <= {i.name for i in lm.graph.input}
    ref = onnx.ModelProto()
    ref.CopyFrom(model)
    got = light.inferred_shapes(model, lm, **KW)
    onnx.checker.check_model(ref, full_check=False)
    want = onnx.shape_inference.infer_shapes(ref, **KW)
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


def test_an_unusual_initializer_stays_and_the_checker_still_refuses_it():
    """A large initializer with two value fields is not moved: the checker sees it and
    the import refuses the model with the checker's message."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [80, 80], [0.0] * 6400)
    w.raw_data = b"\0" * (6400 * 4)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 80])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 80])],
                          [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not light.movable(model.graph.initializer[0])
    with pytest.raises(InputError, match="onnx.checker failed"):
        prepare_model(model)
