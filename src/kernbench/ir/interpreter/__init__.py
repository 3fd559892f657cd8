"""The IR reference interpreter (its quantization semantics in `core`).

`core` holds the Interpreter (values, quantization state, the run loop); `params` turns
each IR node into a LayerCall (by its op class, `kernbench.ir.ops`): a `kernbench.numerics.layers` kernel name and plain params,
which is also what the simulator's data pass runs for a whole-layer op.
"""

from __future__ import annotations

from typing import Any

from kernbench.ir.interpreter.core import Interpreter, layer_outputs, run, run_call
from kernbench.ir.interpreter.params import LayerCall, prepare
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import OPS
from kernbench.ir.ops.base import QuantState

__all__ = ["Interpreter", "LayerCall", "prepare", "run", "run_call", "layer_outputs",
           "KERNELS"]


def _kernel(op_type: str) -> Any:
    def k(interp: QuantState | None, node: LayerIR, ins: list[Any]) -> list[Any]:
        return run_call(prepare(interp, node), node, ins)

    return k


#: op_type → kernel(interp, node, inputs) → outputs (interp may be None for ops that
#: need no quantization state, e.g. elementwise: the importer folds with it)
KERNELS = {op: _kernel(op) for op in sorted(OPS)}
