"""CMDQ emission pass: one entry per tile op, then END (spec §4, format 1.1).

An entry is the op's opcode, id (its program position), layer, PE, CMDQ fields, the TCM
bank and offset of every operand role, and `deps_before`; END waits for every op nothing
else waits for. The result is `state.cmdq`, a `CmdqDocument`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kernbench.cmdq.schema import CMDQ_VERSION
from kernbench.compiler.region import Region, StorageUse
from kernbench.compiler.state import CmdqDocument, CmdqMetadata, CompileState
from kernbench.compiler.tilegraph import TileOp


def _operands(e: dict[str, Any], op: TileOp) -> dict[str, Any]:
    """`e` with the TCM bank and offset of every operand role of `op`."""
    extra = op.role_offset
    for role, b in op.reads + op.writes:
        keys = _ROLE_KEYS.get(role)
        if keys is None:
            keys = _ROLE_KEYS[role] = (f"{role}_bank", f"{role}_offset")
        e[keys[0]] = b.bank
        off = b.bank_offset
        if role == "spm":
            off += op.buf_offset
        if extra:
            off += extra.get(role, 0)
        e[keys[1]] = off
    return e


#: operand role → its entry's bank and offset field names
_ROLE_KEYS: dict[str, tuple[str, str]] = {}


def entry_of(op: TileOp) -> dict[str, Any]:
    """The CMDQ JSON entry of a placed, allocated and scheduled tile op."""
    e: dict[str, Any] = {"opcode": op.opcode, "id": op.index, "layer_id": op.layer,
                         "pe": op.pe}
    e.update(op.fields)
    if op.steps:  # VE_FUSED_TILE: each step its opcode, fields and operands
        e["steps"] = [_operands({"opcode": s.opcode, **{k: v for k, v in s.fields.items()
                                                      if k != "ve_id"}}, s)
                      for s in op.steps]
    else:
        _operands(e, op)
    e["deps_before"] = op.deps
    return e


class Emitter:
    """The emit pass's state, fed ops in program order: their entries (`feed`), then END
    (`end`), which waits for every op nothing else waits for (kept as they come: the set
    follows the ops still without a dependent, not the program)."""

    def __init__(self) -> None:
        self.sinks: dict[int, None] = {}  # ids nothing waits for yet, in program order
        self.count = 0

    def feed(self, ops: list[TileOp]) -> list[dict[str, Any]]:
        out = []
        for op in ops:
            out.append(entry_of(op))
            for d in op.deps:
                self.sinks.pop(d, None)
            self.sinks[op.index] = None
        self.count += len(out)
        return out

    def end(self) -> dict[str, Any]:
        return {"opcode": "END", "id": self.count, "layer_id": None,
                "deps_before": sorted(self.sinks)}


def cmdq_metadata(state: CompileState) -> CmdqMetadata:
    """The program's metadata (spec §4)."""
    return CmdqMetadata(version=CMDQ_VERSION,
                        graph_name=state.graph.metadata.get("model_name", "model"),
                        generated_by="kernbench.compiler", topology=state.topology.name)


@dataclass(frozen=True)
class Emit:
    """Write the TileGraph as a CMDQ program (state.cmdq)."""

    name: str = "emit"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("cmdq",)

    def apply(self, state: CompileState) -> CompileState:
        em = Emitter()
        entries = em.feed(state.require_tiles().ops)
        entries.append(em.end())
        state.cmdq = CmdqDocument(entries, cmdq_metadata(state))
        return state

    def on_regions(self, state: CompileState, use: StorageUse) -> EmitRegions:
        return EmitRegions(Emitter())


@dataclass
class EmitRegions:
    """The emit pass region by region: the region's entries, then END after the last."""

    emitter: Emitter

    def feed(self, region: Region) -> None:
        region.entries = self.emitter.feed(region.ops)

    def end(self, region: Region) -> None:
        region.entries = [self.emitter.end()]
