"""The compiler, layer by layer (compiler.stream, ADR-0713): the same program as the
whole-graph pipeline, entry for entry, while what it keeps does not grow with the layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.compiler.pe_choice import structure_copy
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.compiler.region import Region
from kernbench.compiler.stream import FROM_TILING, compile_streamed
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "zoo"
TINY = ROOT / "hf_configs" / "tiny-llama-4l.json"


def _llama(tmp_path: Path, layers: int, shape: LlmShape):
    cfg = json.loads(TINY.read_text())
    cfg["num_hidden_layers"] = layers
    path = tmp_path / f"llama{layers}.json"
    path.write_text(json.dumps(cfg))
    return build_llm_graph(load_hf_config(path), shape)


def _both(graph, topo_name: str):
    topo = load_topology(topo_name)
    sc = compile_streamed(structure_copy(graph), topo)
    streamed = [e for chunk in sc.chunks() for e in chunk]
    state, _ = compile_graph(graph, topo)
    return sc, streamed, state


CASES = {
    "llama prefill, shape-only (HBM reuse)": (lambda p: _llama(p, 4, LlmShape(1, 64, 0)), "base"),
    "llama batched decode, shape-only": (lambda p: _llama(p, 4, LlmShape(2, 1, 64)), "base"),
    # one row: the down and output projections reduced with the next RMSNorm (ADR-0733)
    "llama decode, shape-only": (lambda p: _llama(p, 4, LlmShape(1, 1, 64)), "base"),
    "gpt2 with weights": (lambda p: load_model(ZOO / "gpt2.onnx")[0], "base"),
    "bert QDQ": (lambda p: load_model(ZOO / "bert_qdq_static.onnx")[0], "small"),
    "resnet (fused ReLU)": (lambda p: load_model(ZOO / "resnet.onnx")[0], "base"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_program_is_the_whole_graph_program(tmp_path, case):
    build, topo = CASES[case]
    sc, streamed, state = _both(build(tmp_path), topo)
    assert streamed == state.cmdq.entries  # entry for entry: deps, TCM offsets, addresses
    assert sc.entries == len(streamed)
    per_layer: dict[str, int] = {}
    for e in streamed[:-1]:
        per_layer[e["layer_id"]] = per_layer.get(e["layer_id"], 0) + 1
    assert sc.survey.layer_entries == per_layer
    # the survey's memory plan is the one the lowering completes, in both compiles
    assert sc.survey.memory.to_json() == sc.state.memory.to_json() == state.memory.to_json()
    assert sc.survey.tiles.fused_into == state.tiles.fused_into
    with pytest.raises(RuntimeError, match="already produced"):
        next(sc.chunks())


def test_a_small_program_is_finished_whole_from_the_same_passes(tmp_path):
    """`finish()` runs the passes from tiling on the state the stream prepared: the
    program `compile_graph` makes (what a run uses for the PE choice of a small model)."""
    graph = load_model(ZOO / "gpt2.onnx")[0]
    topo = load_topology("base")
    finished, _ = compile_streamed(structure_copy(graph), topo).finish()
    state, _ = compile_graph(graph, topo)
    assert finished.cmdq.entries == state.cmdq.entries
    assert finished.memory.to_json() == state.memory.to_json()


@pytest.mark.parametrize("size", [3, 0])
def test_the_passes_on_regions_of_any_size_make_the_whole_graph_program(size):
    """The passes from tiling on, each run region by region (`on_regions`), make the
    program `compile_graph` makes whatever the regions: three nodes at a time, or the
    whole graph as one region (0)."""
    graph = load_model(ZOO / "gpt2.onnx")[0]
    topo = load_topology("base")
    state, _ = compile_graph(graph, topo)
    sc = compile_streamed(structure_copy(graph), topo)
    steps = [p.on_regions(sc.state, sc.survey.use) for p in FROM_TILING]
    assert [p.name for p in FROM_TILING] == ["tiling", "placement", "tcm_alloc", "schedule",
                                             "emit"]
    nodes = sc.state.graph.nodes
    size = size or len(nodes)
    entries = []
    for i in range(0, len(nodes), size):
        region = Region(nodes[i:i + size])
        for step in steps:
            step.feed(region)
        entries += region.entries
    last = Region(())
    for step in steps:
        step.end(last)
    assert entries + last.entries == state.cmdq.entries


def test_what_the_stream_keeps_does_not_grow_with_layers(tmp_path):
    """Twice the layers, twice the entries. The HBM accesses the scheduler remembers stay
    the same: a reused storage's accesses go once later writes cover them. The TCM buffer
    users it remembers (for WAR on reused TCM space) are bounded by the TCM: dead space
    not yet reused; with a small TCM the rings wrap within a layer and the count levels
    off. The whole-graph pipeline keeps every op instead."""
    topo = load_topology("base", ["cube.pe_template.pe_tcm.capacity_kib=64",
                                  "cube.pe_template.pe_tcm.reserved_kib=16"])
    kept, entries = {}, {}
    for layers in (4, 8):
        sc = compile_streamed(_llama(tmp_path, layers, LlmShape(1, 64, 0)), topo)
        entries[layers] = sum(len(c) for c in sc.chunks())
        kept[layers] = sc.peak_kept
    assert entries[8] > 1.9 * entries[4]
    assert kept[8][0] == kept[4][0] < entries[4] / 10, (kept, entries)
    assert kept[8][1] < 1.3 * kept[4][1], (kept, entries)
