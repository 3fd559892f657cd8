"""The IR ops as classes (kernbench.ir.ops): every table the verifier, the interpreter and
the compiler read is derived from them, and an op or an ELEMENTWISE kind without a cycle
cost is refused, never priced as a copy by default."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kernbench.cmdq.opcodes import MODEL_BY_OPCODE
from kernbench.cmdq.opcodes.ve import VeGeluTile
from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES
from kernbench.errors import InputError
from kernbench.ir.interpreter import KERNELS, run
from kernbench.ir.onnx_import import import_model_proto
from kernbench.ir.onnx_import.handlers import SUPPORTED_OPS
from kernbench.ir.ops import BY_ONNX, EW_KINDS, OPS, IrOp, op_class
from kernbench.ir.ops.ew_kind import EwKind
from kernbench.ir.verify import KNOWN_OPS, verify
from kernbench.numerics.elementwise import BINARY_FNS, UNARY_FNS
from kernbench.numerics.layers import LAYER_KERNELS
from kernbench.numerics.unary_extra import EXTRA_FNS


def test_every_vector_op_has_a_cost_of_the_cost_table():
    assert set(KNOWN_OPS) == set(OPS) == set(KERNELS)
    for op, cls in OPS.items():
        if cls.vector and op != "ELEMENTWISE":
            assert cls.layer_cost in DEFAULT_MATH_OP_CYCLES, op
        if cls.vector_opcode is not None:
            assert cls.vector_opcode in MODEL_BY_OPCODE.values(), op
        if cls.kernel is not None:
            assert cls.kernel in LAYER_KERNELS, op


def test_the_cost_of_a_tiled_op_is_its_opcodes():
    """An op's whole-layer cost is its vector opcode's cost_op unless the class says
    otherwise (POOL: a sum per element run whole)."""
    differ = {op for op, c in OPS.items()
              if c.vector_opcode is not None and c.layer_cost != c.vector_opcode.cost_op}
    assert differ == {"POOL", "ELEMENTWISE"}  # ELEMENTWISE: by kind (`cost_of`)
    assert op_class("GELU").layer_cost == "gelu"


def test_a_vector_op_without_a_cost_is_refused():
    with pytest.raises(TypeError, match="no pe_math cost"):
        type("Frob", (IrOp,), {"op_type": "FROB"})
    with pytest.raises(TypeError, match="no pe_math cost"):
        type("Frob", (IrOp,), {"op_type": "FROB", "layer_cost": "frobnicate"})
    # a tensor-engine op is priced by the TE; a vector opcode brings its cost
    assert type("Te", (IrOp,), {"op_type": "TE_X", "vector": False}).layer_cost is None
    assert type("G", (IrOp,), {"op_type": "G_X", "vector_opcode": VeGeluTile}).layer_cost \
        == "gelu"
    assert "FROB" not in OPS and "G_X" not in OPS  # only `register` adds an op


def test_an_elementwise_kind_without_a_cost_is_refused():
    with pytest.raises(TypeError, match="no pe_math cost"):
        type("Frob", (EwKind,), {"kind": "frob"})
    with pytest.raises(TypeError, match="no pe_math cost"):
        type("Frob", (EwKind,), {"kind": "frob", "cost": "frobnicate"})


def test_every_kind_has_a_numerics_function_and_a_cost():
    numerics = set(UNARY_FNS) | set(BINARY_FNS) | set(EXTRA_FNS) | {"where", "max", "min",
                                                                    "clip", "cast"}
    assert set(EW_KINDS) == numerics
    for kind in EW_KINDS.values():
        assert kind.cost in DEFAULT_MATH_OP_CYCLES, kind.kind
    assert set(BY_ONNX) <= set(SUPPORTED_OPS)


def _tanh_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "t", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_elementwise_kind_without_a_class_is_refused_by_the_verifier():
    g = import_model_proto(_tanh_model())
    (n,) = g.nodes
    assert n.op_type == "ELEMENTWISE" and n.attributes["op"] == "tanh"
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(run(g, {"x": x})["y"], np.tanh(x.astype(np.float64)),
                               rtol=1e-6)
    n.attributes["op"] = "frobnicate"
    with pytest.raises(InputError, match="unknown ELEMENTWISE op 'frobnicate'"):
        verify(g)


def test_a_shape_rule_names_the_node():
    g = import_model_proto(_tanh_model())
    g.tensors[g.nodes[0].outputs[0]].shape = [3, 2]
    with pytest.raises(InputError, match="shape mismatch: output") as ei:
        verify(g)
    assert g.nodes[0].id in str(ei.value)
