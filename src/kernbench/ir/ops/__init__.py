"""The IR ops, one class per op type (`base.IrOp`): the verifier, the reference interpreter
and the compiler read an op's facts from its class (`OPS`, `op_class`), and the kinds of
ELEMENTWISE from `ew_kind.EW_KINDS` (classes in `elementwise`, `elementwise_extra`). Importing this package registers every op."""

from __future__ import annotations

from kernbench.ir.ops import moe, movement, quant, te, vector  # noqa: F401  (registers the ops)
from kernbench.ir.ops.base import (
           OPS,
           IrOp,
           LayerCall,
           OpRuleError,
           ShapeMismatch,
           node_attrs,
           op_class,
           ops_where,
)
from kernbench.ir.ops.ew_kind import BY_ONNX, EW_KINDS, EwKind
from kernbench.ir.ops.vector import EW_ATTRS

__all__ = ["OPS", "BY_ONNX", "EW_ATTRS", "EW_KINDS", "EwKind", "IrOp", "LayerCall",
           "OpRuleError", "ShapeMismatch", "node_attrs", "op_class", "ops_where"]
