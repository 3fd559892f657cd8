"""CMDQ emission pass: one entry per tile op, then END (spec §4, format 1.1)."""

from __future__ import annotations

from dataclasses import dataclass

from kernbench.cmdq.schema import CMDQ_VERSION
from kernbench.compiler.state import CompileState


@dataclass(frozen=True)
class Emit:
    name: str = "emit"

    def apply(self, state: CompileState) -> CompileState:
        entries = []
        has_dependent: set[int] = set()
        for op in state.tiles.ops:
            e = {"opcode": op.opcode, "id": op.index, "layer_id": op.layer, "pe": op.pe}
            e.update(op.fields)
            for role, b in op.reads + op.writes:
                e[f"{role}_bank"] = b.bank
                e[f"{role}_offset"] = b.bank_offset
            e["deps_before"] = op.deps
            has_dependent.update(op.deps)
            entries.append(e)
        sinks = [e["id"] for e in entries if e["id"] not in has_dependent]
        entries.append({"opcode": "END", "id": len(entries), "layer_id": None,
                        "deps_before": sinks})
        state.cmdq = {
            "cmdq": entries,
            "metadata": {"version": CMDQ_VERSION,
                         "graph_name": state.graph.metadata.get("model_name", "model"),
                         "generated_by": "kernbench.compiler",
                         "topology": state.topology.name},
        }
        return state
