"""A program compiled for a timing run as chunks of raw CMDQ entries (what a merge of
several chips' programs reads as it streams: `compiler.parallel.lockstep`), with what is
known of it before its entries exist."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernbench.compiler import pe_choice
from kernbench.compiler.emit import cmdq_metadata
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pe_choice import structure_copy
from kernbench.compiler.pipeline import write_bundle
from kernbench.compiler.state import CompileState
from kernbench.compiler.stream import compile_streamed
from kernbench.host.flow import (
    CompileRequest,
    Progress,
    _compile_options,
    _compile_whole,
    _report_layer_ops,
)
from kernbench.ir.model import Graph
from kernbench.topology.model import Topology


@dataclass
class ChunkedProgram:
    """`chunks` (read once, END last), its `entries` (END included), the layers in the
    order their entries come (`layer_order`) with each one's entries (`layer_entries`),
    the `state` its bundle was written from (graph, memory plan), its CMDQ `metadata`."""

    chunks: Iterator[list[dict[str, Any]]]
    entries: int
    layer_order: list[str]
    layer_entries: dict[str, int]
    state: CompileState
    metadata: dict[str, Any]


def compile_chunks(graph: Graph, source: Path | None, topology: Topology, out: Path,
                   req: CompileRequest = CompileRequest(), progress: Progress | None = None
                   ) -> ChunkedProgram:  # fmt: skip
    """`flow.compile_for_run`'s program as raw entry chunks: compiled layer by layer as
    they are read (`compiler.stream`; the layer order is the graph's node order, checked
    by whoever reads the chunks against the layers' counts); a program small enough for
    the cost model's PE choice is compiled whole for the PEs it picks (one chunk), as
    `flow.compile_loaded` compiles it. Writes the bundle without cmdq.json."""
    opts = _compile_options(graph, req)
    sc = compile_streamed(structure_copy(graph), topology, opts, progress=progress)
    name = req.model_file or graph.metadata.get("model_name")
    if not req.all_pes and len(topology.pes) > pe_choice.MIN_PES \
            and sc.entries <= pe_choice.MAX_ENTRIES:
        state, _ = _compile_whole(graph, topology, opts, whole=sc.finish()[0])
        _report_layer_ops(layer_op_census(state), req.strict, name)
        write_bundle(state, Path(out), source, cmdq=False, weights=req.write_weights)
        assert state.cmdq is not None
        entries = state.cmdq.entries
        layers: dict[str, int] = {}
        for e in entries:
            if e.get("layer_id"):
                layers[e["layer_id"]] = layers.get(e["layer_id"], 0) + 1
        meta = asdict(cmdq_metadata(state))
        state.cmdq = state.tiles = None
        return ChunkedProgram(iter([entries]), len(entries), list(layers), layers, state,
                              meta)
    _report_layer_ops(sc.survey.census, req.strict, name)
    bstate = sc.bundle_state()
    write_bundle(bstate, Path(out), source, cmdq=False, entries=sc.entries,
                 weights=req.write_weights)
    order = [n.id for n in sc.state.graph.nodes]
    order += sorted(set(sc.survey.layer_entries) - set(order))
    return ChunkedProgram(sc.chunks(), sc.entries, order, dict(sc.survey.layer_entries),
                          bstate, asdict(cmdq_metadata(sc.state)))


__all__ = ["ChunkedProgram", "compile_chunks"]
