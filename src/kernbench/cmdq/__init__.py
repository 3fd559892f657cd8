"""The ISA: the CMDQ command-queue format and everything that is a fact of an opcode.

One class per opcode (`opcodes/`: DMA, TE, VE, layer ops, control) carries its engine, cost
op, payload fields, data semantics (the plain-data description the data pass executes),
validation rules and lowering to PE commands; `schema` builds the pydantic program model
from them, `io` reads and writes programs, `validate` checks one against a topology's
limits, `hw` lowers entries for the Control FSM. Never imports ir, compiler or host.
"""
