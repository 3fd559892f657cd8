"""Every IR op declares its operands, results and attributes (`kernbench.ir.ops.defs`); the
verifier refuses a node that breaks them with one line naming the node and the field, exit
code 2 through `kernbench validate` and `kernbench compile` of an ir.json; `Op.attrs(node)`
gives the declared attributes, defaults applied."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest
from ir_helpers import model_path

from kernbench.cli import main
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import OPS, OpRuleError, op_class
from kernbench.ir.ops.base import IrOp, register
from kernbench.ir.ops.defs import REQUIRED, Attr, Operand, arity_range


def test_every_op_declares_its_operands_results_and_attributes():
    for op, cls in OPS.items():
        assert cls.operands and all(isinstance(o, Operand) for o in cls.operands), op
        assert cls.results and all(isinstance(o, Operand) for o in cls.results), op
        assert all(isinstance(a, Attr) and a.help for a in cls.attributes), op
        assert set(cls.attr_defs) == {a.name for a in cls.attributes}, op
        assert set(cls.kernel_attrs) <= set(cls.attr_defs), op
        fields = {f.name for f in dataclasses.fields(cls.Attrs)}
        assert fields == set(cls.attr_defs), op
        assert cls.Attrs.__dataclass_params__.frozen, op


def test_an_op_that_declares_nothing_is_not_registered():
    te = type("Te", (IrOp,), {"op_type": "TE_UNDECLARED", "vector": False})
    with pytest.raises(TypeError, match="declares no operands"):
        register(te)
    assert "TE_UNDECLARED" not in OPS


def test_arity():
    assert arity_range(op_class("GEMM").operands) == (2, 3)
    assert arity_range(op_class("CONCAT").operands) == (1, None)
    assert arity_range(op_class("QKV_PROJ").results) == (3, 3)


def _node(op: str, attributes: dict, inputs=("x",), outputs=("y",)) -> LayerIR:
    return LayerIR(id="n1", op_type=op, inputs=list(inputs), outputs=list(outputs),
                   attributes=attributes)


def test_the_accessor_applies_the_defaults():
    a = op_class("ATTENTION").attrs(_node("ATTENTION", {
        "num_heads": 4, "num_kv_heads": 2, "head_dim": 8, "scale": 0.5}))
    assert (a.num_heads, a.num_kv_heads, a.head_dim, a.scale) == (4, 2, 8, 0.5)
    assert (a.causal, a.causal_offset, a.softcap, a.mask, a.kv_block) == (
        False, 0, 0.0, "none", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.scale = 1.0  # type: ignore[misc]
    assert op_class("KV_UPDATE").attrs(_node("KV_UPDATE", {})).axis == 2
    assert op_class("GELU").attrs(_node("GELU", {})).approximate == "none"
    assert op_class("GELU").attrs(_node("GELU", {"approximate": "tanh"})).approximate == "tanh"
    with pytest.raises(OpRuleError, match="required attribute"):
        op_class("ATTENTION").attrs(_node("ATTENTION", {"num_heads": 4}))


def test_the_defaults_are_of_their_declared_type():
    for op, cls in OPS.items():
        for a in cls.attributes:
            if a.default is not REQUIRED:
                assert a.problem(a.default) is None, (op, a.name)
            assert typing.get_origin(a.type) is not None or isinstance(a.type, type) \
                or a.type is typing.Any, (op, a.name)


@pytest.mark.parametrize("attributes, field, reason", [
    ({"eps": 1e-5}, "attributes.axis", "required attribute is missing"),
    ({"axis": 1, "eps": "tiny"}, "attributes.eps", "expected float, got str 'tiny'"),
    ({"axis": True, "eps": 1e-5}, "attributes.axis", "expected int, got bool True"),
    ({"axis": 1, "eps": 1e-5, "frob": 1}, "attributes.frob",
     "unknown attribute (this op declares: axis, eps)"),
])
def test_check_node_names_the_attribute(attributes, field, reason):
    with pytest.raises(OpRuleError) as ei:
        op_class("LAYER_NORM").check_node(_node("LAYER_NORM", attributes))
    assert (ei.value.field, str(ei.value)) == (field, reason)


def test_allowed_values_and_per_kind_elementwise_attributes():
    gelu = op_class("GELU")
    with pytest.raises(OpRuleError, match="'exact' is not one of 'none', 'tanh'"):
        gelu.check_node(_node("GELU", {"approximate": "exact"}))
    ew = op_class("ELEMENTWISE")
    ew.check_node(_node("ELEMENTWISE", {"op": "leaky_relu", "alpha": 0.2}))
    ew.check_node(_node("ELEMENTWISE", {"op": "cast", "to": "fp16"}))
    with pytest.raises(OpRuleError) as ei:  # alpha is leaky_relu's, not tanh's
        ew.check_node(_node("ELEMENTWISE", {"op": "tanh", "alpha": 0.2}))
    assert ei.value.field == "attributes.alpha"
    with pytest.raises(OpRuleError) as ei:
        ew.check_node(_node("ELEMENTWISE", {"op": "leaky_relu", "alpha": "big"}))
    assert str(ei.value) == "expected float or null, got str 'big'"


def _ir(tmp_path) -> dict:
    assert main(["import", str(model_path("gpt2")), "-o", str(tmp_path / "ir.json")]) == 0
    return json.loads((tmp_path / "ir.json").read_text())


def _layer_norm(d: dict) -> dict:
    return next(n for n in d["graph"]["nodes"] if n["op_type"] == "LAYER_NORM")


def _wrong_type(n: dict) -> None:
    n["attributes"]["eps"] = "tiny"


def _missing(n: dict) -> None:
    del n["attributes"]["eps"]


def _unknown(n: dict) -> None:
    n["attributes"]["frob"] = 1


def _operands(n: dict) -> None:
    n["inputs"] = n["inputs"] + n["inputs"][:1]


@pytest.mark.parametrize("mutate, tail", [
    (_wrong_type, "field 'attributes.eps': expected float, got str 'tiny'"),
    (_missing, "field 'attributes.eps': required attribute is missing"),
    (_unknown, "field 'attributes.frob': unknown attribute (this op declares: axis, eps)"),
    (_operands, "field 'inputs': LAYER_NORM takes 1 to 3 inputs (x, scale?, bias?), got 4"),
])
@pytest.mark.parametrize("command", ["validate", "compile"])
def test_the_cli_refuses_a_node_in_one_line(tmp_path, capsys, mutate, tail, command):
    d = _ir(tmp_path)
    n = _layer_norm(d)
    mutate(n)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    capsys.readouterr()
    argv = ["validate", str(bad)] if command == "validate" else \
        ["compile", str(bad), "--out", str(tmp_path / "b")]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.splitlines() == [f"error: {bad}: node {n['id']}: {tail}"], err
    assert not (tmp_path / "b").exists()
