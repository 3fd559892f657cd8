"""The IR side of every interpreter kernel: an IR node (+ the interpreter's quantization
state: calibrated scales, bit widths, imported integer weights) → a LayerCall, i.e. the
name of a `kernbench.numerics.layers` kernel and its plain params.

The interpreter runs the call on its values; the simulator's data pass (host/bundle.py)
stores the same call in its op log for a whole-layer op and runs it on the values it
reads from memory. One code path: what the interpreter computes is what the data pass
computes.
"""

from __future__ import annotations

from kernbench.errors import InputError
from kernbench.ir.model import LayerIR
from kernbench.ir.ops import OPS, LayerCall
from kernbench.ir.ops.base import QuantState

__all__ = ["LayerCall", "prepare"]


def prepare(interp: QuantState | None, node: LayerIR) -> LayerCall:
    """The LayerCall of `node` (`interp` may be None for ops without quantization): its op
    class's kernel (`kernbench.ir.ops`)."""
    cls = OPS.get(node.op_type)
    if cls is None:
        raise InputError(f"op_type {node.op_type!r} has no interpreter kernel",
                         where=f"node {node.id}")
    return cls.prepare(interp, node)
