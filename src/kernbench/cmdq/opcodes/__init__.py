"""The CMDQ instruction set: one class per opcode, one module per family.

Each class carries every fact of its opcode (payload fields, engine, timing and cost op,
data semantics, validation rules, lowering); `registry.MODEL_BY_OPCODE` lists them in
registration order (the order of the JSON Schema's union). Importing this package
registers the built-in opcodes. docs/cmdq.md "Adding an opcode".
"""

# isort: off
# Registration order is the JSON Schema's union order: DMA, TE, VE, layer ops, control.
from kernbench.cmdq.opcodes import dma, gather, mcast, te, ve, ve_quant, ve_attn  # noqa: F401
from kernbench.cmdq.opcodes import ve_window, ve_elementwise, ve_fused  # noqa: F401
from kernbench.cmdq.opcodes import layer, control  # noqa: F401
# isort: on
from kernbench.cmdq.opcodes.base import NO_DATA, DataEnv, Lowering, Opcode, Rules
from kernbench.cmdq.opcodes.registry import (
    MODEL_BY_OPCODE,
    register_opcode,
    registered,
    unregister_opcode,
)

__all__ = ["MODEL_BY_OPCODE", "NO_DATA", "DataEnv", "Lowering", "Opcode", "Rules",
           "register_opcode", "registered", "unregister_opcode"]
