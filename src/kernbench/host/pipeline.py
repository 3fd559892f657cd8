"""`kernbench run --pp N` (with `--tp`, `--dp`, `--micro-batches`): pipeline-parallel
runs over the chips of a multi-chip topology (docs/multichip.md).

The model's decoder layers are split into N stages of L / N consecutive layers
(`compiler.parallel.pp_graph`); each stage is split by `--tp` (`shard_graph`) and
compiled for one chip. A shape-only model compiles each stage once and places it on
every tensor-parallel rank and replica; a model with weight values compiles every
(stage, rank). `compiler.parallel.pp_program.merge_pipeline` makes the one program: each
chip runs its stage once per micro-batch, the activations go to the next stage by
send/recv over the chip links, the stage's all-reduces run within its chips.

Chips: replica d, stage s, tensor-parallel rank t is the topology's ring-order chip
(d·N + s)·tp + t, so a stage's ranks are neighbours. The CLI builds (or binds) the model
at the micro-batch (`--batch / (dp · micro-batches)`); the LLM figures count the whole
batch.

Block replay: with at least 4 identical layers per stage the model is truncated to
k layers per stage (k = 4 from 6 layers per stage, else 3) and simulated as a pipeline;
every stage-micro-batch cell of the pipeline's critical path (N + M − 1 of them) gains the
L / N − k replayed layers, so total = simulated + (N + M − 1)(L / N − k) × P, with P the
block period measured on stage 0's first micro-batch (checked steady within 1 % as on one
chip); the additive figures (energy, commands) add M · N · (L / N − k) blocks.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import parse_entries
from kernbench.cmdq.schema import CMDQ_VERSION
from kernbench.common.program import LayerSpan
from kernbench.compiler.parallel import shard_graph
from kernbench.compiler.parallel.pp_graph import StageGraph, check_stages, stage_graph
from kernbench.compiler.parallel.pp_program import Lane, Transfer, merge_pipeline
from kernbench.compiler.parallel.tp_graph import TpGraph
from kernbench.compiler.pipeline import load_model
from kernbench.compiler.state import CompileState
from kernbench.errors import InputError, warn
from kernbench.host.block_detect import mark_blocks
from kernbench.host.block_replay import (
    TOLERANCE,
    cycle_mark,
    plan_replay,
    steady_period,
    truncate_blocks,
)
from kernbench.host.flow import (
    CompileRequest,
    SimResult,
    compile_loaded,
)
from kernbench.host.llm import LlmFacts, check_fit, llm_facts, llm_section
from kernbench.host.parallel import _high_water, _site_buffers, chip_topology, simulate_merged
from kernbench.host.replay_figures import ActionsOf, whole_model_figures
from kernbench.host.run import RunHooks, RunOptions
from kernbench.ir.bundle_ir import save_bundle_ir
from kernbench.ir.model import Graph, is_shape_only, load_weights, save_weights
from kernbench.report.stats import Stats, set_section, set_whole_time
from kernbench.topology.chips import ring_order
from kernbench.topology.model import Topology


@dataclass(frozen=True)
class Pipeline:
    """--pp / --micro-batches as checked: `batch` is what one micro-batch runs (None:
    the model's)."""

    pp: int = 1
    micro_batches: int = 1
    batch: int | None = None

    def run_fields(self) -> dict[str, int]:
        """The RunOptions fields it sets."""
        return {"pp": self.pp, "micro_batches": self.micro_batches}


def check_pipeline(pp: int | None, micro_batches: int | None, batch: int | None,
                   decode: bool) -> Pipeline:
    """--pp / --micro-batches against the batch one replica runs (one line naming the
    value, exit 2). Default micro-batches: a decode step 1 (the stages run one after
    another), a prefill the largest divisor of the batch that is at most --pp."""
    pp = 1 if pp is None else pp
    if pp < 1:
        raise InputError(f"--pp {pp} must be at least 1", field="--pp")
    if micro_batches is not None and micro_batches < 1:
        raise InputError(f"--micro-batches {micro_batches} must be at least 1",
                         field="--micro-batches")
    if micro_batches is not None and pp == 1 and micro_batches > 1:
        raise InputError("--micro-batches needs --pp (a pipeline of stages)",
                         field="--micro-batches")
    if micro_batches is None:
        b = batch or 1
        micro_batches = 1 if decode else max(m for m in range(1, pp + 1) if b % m == 0)
    if micro_batches > 1:
        if batch is None:
            raise InputError(f"--micro-batches {micro_batches} splits the batch: give "
                             f"--batch (a multiple of {micro_batches})",
                             field="--micro-batches")
        if batch % micro_batches:
            raise InputError(f"--micro-batches {micro_batches}: batch {batch} (per replica) "
                             f"does not split into {micro_batches} micro-batches",
                             field="--micro-batches")
        batch //= micro_batches
    return Pipeline(pp, micro_batches, batch)


def pipeline_chips(topo: Topology, tp: int, pp: int, dp: int) -> dict[tuple[int, int, int], int]:
    """(replica, stage, rank) → chip (see the module docstring); more chips than the
    topology has: one line, exit 2."""
    need = tp * pp * dp
    if need > topo.chips:
        raise InputError(f"--tp {tp} × --pp {pp} × --dp {dp} = {need} chips: the topology "
                         f"'{topo.name}' has {topo.chips} chip(s) (a multi-chip preset such "
                         "as t3k or large-x8, or --set system.chips=N)", field="--pp")
    order = ring_order(topo.config.system) if topo.config.system is not None else [0]
    return {(d, s, t): order[(d * pp + s) * tp + t]
            for d in range(dp) for s in range(pp) for t in range(tp)}


@dataclass
class _Stage:
    """What compiling one (stage, rank) gave."""

    sg: StageGraph
    entries: list[dict[str, Any]]
    sites: list[Any]
    send: dict[str, tuple[int, int, str]]  # tensor → (offset, count, dtype)
    recv: dict[str, int]                   # tensor → offset of its @recv buffer
    layers: list[str]


def _placement(state: CompileState, tid: str) -> tuple[int, int, str]:
    plan = state.memory
    assert plan is not None
    p = plan.placements.get(tid)
    if p is None or p.parts or not p.contiguous:
        raise ValueError(f"pipeline buffer '{tid}' is not one contiguous storage")
    return p.addr, math.prod(state.graph.tensors[tid].shape), p.dtype


def _compile_stage(graph: Graph, source: Path | None, tp: int, pp: int, s: int, t: int,
                   chip: Topology, out: Path, req: CompileRequest, hooks: RunHooks
                   ) -> tuple[_Stage, int]:  # fmt: skip
    tg = shard_graph(graph, tp, t)
    sg = stage_graph(tg.graph, pp, s)
    names = {n.id for n in sg.graph.nodes}
    sites = [x for x in tg.sites if x.node in names]
    state, _ = compile_loaded(sg.graph, source, chip, out, req,
                              hooks.compile_progress if s == t == 0 else None)
    bufs = _site_buffers(TpGraph(sg.graph, sites), state) if sites else []
    send = {x: _placement(state, x) for x in sg.send}
    recv = {r.src: _placement(state, r.dst)[0] for r in sg.recv}
    high = _high_water(state)
    assert state.cmdq is not None
    entries = state.cmdq.entries
    state.cmdq = state.tiles = state.memory = None
    return _Stage(sg, entries, bufs, send, recv, [n.id for n in sg.graph.nodes]), high


def _bundle_of(bundle: Path, s: int, t: int) -> Path:
    return bundle if s == t == 0 else bundle.parent / f"{bundle.name}.pp{s}tp{t}"


def _facts(graph: Graph, dp: int, m: int) -> LlmFacts | None:
    """The whole step's LLM facts from a micro-batch's graph: batch, MACs and KV cache
    times dp · m; the weights every replica holds times dp; the bytes a step must read:
    the weights once per replica, the rest (activations, KV cache) per micro-batch."""
    f = llm_facts(graph)
    if f is None or dp * m == 1:
        return f
    rest = max(0, f.step_read_bytes - f.weight_bytes)
    return dataclasses.replace(f, batch=f.batch * dp * m, macs=f.macs * dp * m,
                               weight_bytes=f.weight_bytes * dp,
                               kv_cache_bytes=f.kv_cache_bytes * dp * m,
                               step_read_bytes=dp * (f.step_read_bytes + (m - 1) * rest))


def _refuse(graph: Graph, opts: RunOptions) -> None:
    if opts.dump_intermediates:
        raise InputError("--dump-intermediates with --pp: a stage's chips hold part of the "
                         "model's tensors", field="--pp")
    if not opts.verify:
        return
    if opts.dp > 1 or opts.micro_batches > 1:
        flag = "--dp" if opts.dp > 1 else "--micro-batches"
        raise InputError(f"--verify with --pp needs one replica and one micro-batch ({flag} "
                         f"{opts.dp if opts.dp > 1 else opts.micro_batches}): a stage "
                         "replays its program per micro-batch on the same buffers",
                         field=flag)
    if opts.tp > 1 and any(i in shard_graph(graph, opts.tp, 0).split_inputs
                           for i in graph.inputs):
        raise InputError(f"--verify with --tp {opts.tp}: the model's KV-cache inputs are split "
                         "by head; verify a prefill model (no past keys/values)", field="--tp")


def _marked(graph: Graph, pp: int) -> Graph:
    if any(isinstance(n.metadata.get("block"), int) for n in graph.nodes):
        return graph
    found, why = mark_blocks(graph)
    if found is None:
        raise InputError(f"--pp {pp}: no decoder layers found to split into stages ({why})",
                         field="--pp")
    return found


def _replay_keep(graph: Graph, per: int, opts: RunOptions) -> int | None:
    """Layers per stage to simulate (None: all)."""
    if opts.exact or opts.verify or per < 4:
        return None
    plan, _ = plan_replay(graph)
    if plan is None:
        return None
    return 4 if per >= 6 else 3


def run_pipeline(model: Path, topo: Topology, out: Path, opts: RunOptions,
                 hooks: RunHooks) -> SimResult:
    """`run_model` with `opts.pp` > 1 (see the module docstring)."""
    tp, pp, dp, mb = opts.tp, opts.pp, opts.dp, opts.micro_batches
    chips = pipeline_chips(topo, tp, pp, dp)
    graph, source = load_model(Path(model), opts.qconfig)
    marked = _marked(graph, pp)
    per = check_stages(marked, pp)
    facts = _facts(graph, dp, mb)
    if facts is not None:
        for w in check_fit(facts, topo):
            warn(w)
    _refuse(graph, opts)
    keep = _replay_keep(marked, per, opts)
    compiled = truncate_blocks(marked, keep * pp) if keep is not None else marked
    if keep is not None:
        hooks.note(f"replay: {per} identical layers per stage; simulating {keep} per stage "
                   "and replaying the rest (--exact simulates all)")
    bundle = opts.bundle or Path(out) / "bundle"
    req = CompileRequest(calib_inputs=opts.inputs, strict=opts.strict,
                         qconfig_file=str(opts.qconfig) if opts.qconfig else None,
                         model_file=opts.source or str(model), write_cmdq=False,
                         all_pes=opts.all_pes)
    chip = chip_topology(topo)
    ranks = 1 if is_shape_only(graph) else tp
    stages: dict[tuple[int, int], _Stage] = {}
    high = 0
    for s in range(pp):
        for t in range(ranks):
            st, h = _compile_stage(compiled, source, tp, pp, s, t, chip,
                                   _bundle_of(bundle, s, t), req, hooks)
            stages[(s, t)], high = st, max(high, h)
    transfers = _transfers(stages, pp, ranks)
    lanes = [Lane(c, (d, s, t), stages[(s, t % ranks)].entries,
                  {b.site.node: b for b in stages[(s, t % ranks)].sites},
                  {r.node: r.src for r in stages[(s, t % ranks)].sg.recv},
                  list(stages[(s, t % ranks)].sg.send))
             for (d, s, t), c in sorted(chips.items())]
    merged = merge_pipeline(lanes, transfers, mb, topo, limits_for(topo),
                            scratch_base=-(-high // 4096) * 4096)
    del lanes
    for st in stages.values():  # the merged program holds every entry now
        st.entries = []
    meta = {"version": CMDQ_VERSION, "graph_name": graph.metadata.get("model_name", "model"),
            "generated_by": "kernbench.compiler.parallel", "topology": topo.name}
    groups = [[[chips[(d, s, t)] for t in range(tp)] for s in range(pp)] for d in range(dp)]
    hooks.note(f"--pp {pp} --tp {tp} --dp {dp}, {mb} micro-batch(es): chips {groups}, "
               f"{merged.collective_entries} of {len(merged.entries)} CMDQ entries move data "
               "between chips")
    if opts.verify or opts.write_cmdq:
        _write_bundle(bundle, graph, chips, stages, ranks, topo,
                      [dict(e) for e in merged.entries], meta)
    _write_roofline(bundle, pp, mb)
    prog = parse_entries(merged.entries, meta, file=str(bundle / "cmdq.json"))
    del merged.entries[:]
    section: dict[str, Any] = {
        "tp": tp, "pp": pp, "dp": dp, "micro_batches": mb, "chips": groups,
        "layers_per_stage": per, "collective_entries": merged.collective_entries,
        "collectives_per_rank": len(stages[(0, 0)].sites),
        "sends": [{"from_stage": tr.stage, "tensor": tr.tensor, "count": tr.count,
                   "dtype": tr.dtype} for tr in transfers]}

    def post(stats: Stats, spans: dict[str, LayerSpan], actions_of: ActionsOf) -> Stats:
        section["stage_times"] = _stage_times(stages, pp, mb, spans)
        if keep is not None:
            _replay_pipeline(stats, stages[(0, 0)].sg.graph, keep, per, pp, mb, spans,
                             topo, actions_of)
        if facts is not None and (opts.llm or graph.metadata.get("shape_only")):
            set_section(stats, "llm", llm_section(facts, stats, topo))
        set_section(stats, "parallel", section)
        return stats

    return simulate_merged(bundle, topo, out, opts, hooks, post, prog, "--pp")


def _transfers(stages: dict[tuple[int, int], _Stage], pp: int, ranks: int) -> list[Transfer]:
    out = []
    for s in range(pp - 1):
        for x in stages[(s, 0)].sg.send:
            got = {(stages[(s, t)].send[x], stages[(s + 1, t)].recv[x]) for t in range(ranks)}
            if len(got) != 1:
                raise ValueError(f"the ranks' buffers of '{x}' differ")
            (src, count, dtype), dst = got.pop()
            out.append(Transfer(s, x, src, dst, count, dtype))
    return out


def _stage_times(stages: dict[tuple[int, int], _Stage], pp: int, mb: int,
                 spans: dict[str, LayerSpan]) -> list[dict[str, Any]]:
    """Each (stage, micro-batch): the simulated start and end of its layers (the
    receive included), over its chips."""
    rows = []
    for s in range(pp):
        layers = stages[(s, 0)].layers
        for m in range(mb):
            got = [spans[k] for lid in layers
                   if (k := f"{lid}@mb{m}" if mb > 1 else lid) in spans]
            if got:
                rows.append({"stage": s, "micro_batch": m,
                             "start_ns": round(min(x.start_ns for x in got), 3),
                             "end_ns": round(max(x.end_ns for x in got), 3)})
    return rows


def _replay_pipeline(stats: Stats, stage0: Graph, keep: int, per: int, pp: int, mb: int,
                     spans: dict[str, LayerSpan], topo: Topology,
                     actions_of: ActionsOf) -> None:  # fmt: skip
    """The whole pipeline's figures from the truncated one (the module docstring)."""
    sfx = "@mb0" if mb > 1 else ""
    layer_block = {n.id + sfx: n.metadata["block"] for n in stage0.nodes
                   if isinstance(n.metadata.get("block"), int)}
    # stage 0's first micro-batch, by the stage graph's own layer ids
    d, periods, anchored, dev = steady_period(
        stage0, keep, {lid.removesuffix(sfx): sp for lid, sp in spans.items()
                       if lid.endswith(sfx)})
    cells = pp + mb - 1
    sim_total = float(stats["total_ns"])
    set_whole_time(stats, sim_total + cells * (per - keep) * d)
    set_section(stats, "replay", {
        "blocks": per * pp, "simulated_blocks": keep * pp, "blocks_per_stage": per,
        "simulated_blocks_per_stage": keep, "block_period_ns": round(d, 3),
        "periods_ns": [round(p, 3) for p in periods],
        "anchored_periods_ns": [round(p, 3) for p in anchored],
        "period_deviation": round(dev, 6),
        "tolerance": TOLERANCE, "critical_path_cells": cells,
        "simulated_total_ns": round(sim_total, 3),
        "note": "entries, engines, links, memories and layers describe the simulated "
                "blocks; stage 0's first micro-batch gives the block period"}
        | cycle_mark(periods, anchored))
    whole_model_figures(stats, layer_block, keep, mb * pp * (per - keep), spans, topo,
                        actions_of)


def _write_roofline(bundle: Path, pp: int, mb: int) -> None:
    """The layers' roofline bounds of every stage (rank 0's), once per micro-batch under
    the program's layer ids, into the bundle's roofline.json (the stats' layer table)."""
    rows: dict[str, Any] = {}
    for s in range(pp):
        f = _bundle_of(bundle, s, 0) / "roofline.json"
        if not f.exists():
            return
        for lid, row in json.loads(f.read_text(encoding="utf-8")).items():
            for m in range(mb):
                rows[f"{lid}@mb{m}" if mb > 1 else lid] = row
    (bundle / "roofline.json").write_text(json.dumps(rows, indent=1, sort_keys=True),
                                          encoding="utf-8")


def _write_bundle(bundle: Path, graph: Graph, chips: dict[tuple[int, int, int], int],
                  stages: dict[tuple[int, int], _Stage], ranks: int, topo: Topology,
                  entries: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """The bundle of a pipeline run (`--verify`, `--keep-bundle`): the merged cmdq.json,
    the unsplit ir.json (the reference), every chip's weights at its chip's addresses (the
    first chip's under their own keys, chip c's under `chip<c>/`), the model's inputs on
    every chip whose stage reads them, its outputs where their stage wrote them (rank 0)."""
    per_cubes = len(topo.cubes) // topo.chips
    bases = [topo.cubes[c * per_cubes].hbm_base for c in range(topo.chips)]
    docs = {}
    for key in stages:
        if key[1] < ranks:
            b = _bundle_of(bundle, *key)
            docs[key] = (json.loads((b / "memory.json").read_text(encoding="utf-8")),
                         load_weights(b / "weights.npz"))
    first = chips[(0, 0, 0)]

    def shift(a: dict[str, Any], off: int) -> dict[str, Any]:
        b = dict(a)
        b["address"] = a["address"] + off
        b["replicas"] = [x + off for x in a["replicas"]]
        if a.get("parts"):
            b["parts"] = [[o, nb, addr + off] for o, nb, addr in a["parts"]]
        return b

    tensors: dict[str, Any] = {}
    views: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    for (d, s, t), chip in sorted(chips.items()):
        mem, rw = docs[(s, t % ranks)]
        base = bases[chip]
        for key, a in mem["tensors"].items():
            if key in graph.inputs:
                if a.get("parts"):
                    raise InputError(f"input '{key}' is placed once, spread over the cubes (a "
                                     "model larger than a cube), so the bundle of a --pp run "
                                     "cannot give every chip its copy", field="--pp")
                got = [x + base for x in (a["replicas"] or [a["address"]])]
                if key not in tensors:
                    tensors[key] = dict(a, address=got[0], replicas=got)
                else:
                    tensors[key]["replicas"] = tensors[key]["replicas"] + got
            elif key in graph.outputs and t == 0 and d == 0:
                tensors[key] = shift(a, base)
            elif chip == first:
                tensors[key] = shift(a, base)
                if key in rw:
                    weights[key] = rw[key]
            elif key in rw:
                tensors[f"chip{chip}/{key}"] = shift(a, base)
                weights[f"chip{chip}/{key}"] = rw[key]
        if t == 0 and d == 0:
            for k, v in mem["views"].items():
                if k in graph.tensors and (k in graph.outputs or chip == first):
                    v = dict(v, address=v["address"] + base)
                    if v.get("parts"):
                        v["parts"] = [[o, nb, addr + base] for o, nb, addr in v["parts"]]
                    views[k] = v
                    st = v.get("storage")
                    if st in mem["tensors"] and chip != first:  # an output's storage
                        tensors[st] = shift(mem["tensors"][st], base)
    mem0 = docs[(0, 0)][0]
    mem0["tensors"], mem0["views"] = tensors, views
    (bundle / "memory.json").write_text(json.dumps(mem0, indent=1, sort_keys=True),
                                        encoding="utf-8")
    save_weights(weights, bundle / "weights.npz")
    save_bundle_ir(graph, bundle)  # every weight (no listing)
    (bundle / "cmdq.json").write_text(json.dumps({"cmdq": entries, "metadata": meta}),
                                      encoding="utf-8")
