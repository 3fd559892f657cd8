"""`kernbench run --ep N [--dp M]`: expert-parallel runs of an MoE model (docs/multichip.md).

The routed experts are split over N chips (contiguous blocks); each chip runs the
attention and the router of its own tokens, sends every (token, expert) pair's row to the
chip owning the expert (all-to-all-v dispatch), computes its experts on the rows it
received and sends the outputs back (all-to-all-v combine), where they are weighted and
summed (`compiler.parallel.ep_graph`). Each rank's graph is compiled for one chip and the
programs are joined with the collectives (`compiler.parallel.ep_program`).

How many rows go where is static (a CMDQ program is):
- a shape-only model (config.json, built by the CLI at batch / (N·M)): the routing the
  model was drawn with, drawn for the whole batch and cut into the ranks' token slices, so
  the experts' loads are the one-chip model's at the full batch;
- an ONNX model with gathered experts (`compiler.parallel.ep_onnx`): the router's choice
  on the run's inputs (`--inputs`, or the same seeded inputs --verify draws), computed by
  the reference interpreter. Every chip reads all the tokens, computes the router for all
  of them and the MoE for its T / N; the outputs are all-gathered, so chip 0's outputs
  are the whole model's (--verify checks them).

Block replay works as on one chip when the layers' routings are identical
(`--routing-same-layers`): the model is truncated to the simulated blocks before the
ranks' graphs are built.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import parse_entries
from kernbench.cmdq.schema import CMDQ_VERSION
from kernbench.compiler.parallel.ep_graph import (
    EpGraph,
    MoeBlock,
    check_ep,
    ep_graph,
    find_blocks,
)
from kernbench.compiler.parallel.ep_onnx import find_gathered, split_experts
from kernbench.compiler.parallel.ep_program import EpSiteBuffers, merge_ep_programs
from kernbench.compiler.parallel.rank_names import rename_rank
from kernbench.compiler.pipeline import load_model
from kernbench.compiler.state import CompileState
from kernbench.errors import InputError
from kernbench.host.block_replay import apply_replay
from kernbench.host.ep_bundle import write_ep_bundle
from kernbench.host.ep_stats import ep_moe_section
from kernbench.host.flow import (
    CompileRequest,
    SimResult,
    compile_loaded,
    load_inputs,
)
from kernbench.host.llm import llm_facts, llm_section
from kernbench.host.parallel import (
    Parallel,
    _high_water,
    _replay,
    buffer_addr,
    chip_topology,
    simulate_merged,
)
from kernbench.host.precision import run_precision
from kernbench.host.run import RunHooks, RunOptions
from kernbench.ir.model import Graph, is_shape_only
from kernbench.ir.qconfig import apply_qconfig, load_qconfig
from kernbench.models.moe_routing import Routing, expert_choice
from kernbench.report.stats import Stats, set_precision, set_section
from kernbench.topology.chips import ring_order
from kernbench.topology.model import Topology


def check_ep_options(ep: int, tp: int | None, dp: int | None, batch: int | None,
                     model: Path | None) -> Parallel:
    """--ep against --tp / --dp and the batch (one line naming the value, exit 2). A
    config.json model is built at batch / (ep × dp) per chip (its attention is data
    parallel); an ONNX model keeps its batch (its tokens are split inside the MoE)."""
    from kernbench.models.hf_config import is_hf_config

    if ep < 1:
        raise InputError(f"--ep {ep} must be at least 1", field="--ep")
    if tp not in (None, 1):
        raise InputError(f"--ep {ep} with --tp {tp}: tensor-parallel attention under "
                         "expert parallelism is not built (docs/multichip.md)", field="--ep")
    dp = 1 if dp is None else dp
    if dp < 1:
        raise InputError(f"--dp {dp} must be at least 1", field="--dp")
    if model is not None and Path(model).exists() and is_hf_config(Path(model)):
        ranks = ep * dp
        if batch is None or batch % ranks:
            raise InputError(f"--ep {ep}" + (f" × --dp {dp}" if dp > 1 else "") +
                             f": a config.json model's batch is split over {ranks} chips; "
                             f"give --batch as a multiple of {ranks}"
                             + (f" (got {batch})" if batch is not None else ""), field="--ep")
        batch //= ranks
    return Parallel(1, dp, batch, ep)


def ep_chips(topo: Topology, ep: int, dp: int) -> list[list[int]]:
    """Each replica's chips (consecutive runs of the ring order); more chips than the
    topology has: one line, exit 2."""
    need = ep * dp
    if need > topo.chips:
        what = f"--ep {ep}" if dp == 1 else f"--ep {ep} × --dp {dp} = {need} chips"
        raise InputError(f"{what}: the topology '{topo.name}' has {topo.chips} chip(s) "
                         "(a multi-chip preset such as t3k or large-x8, or --set "
                         "system.chips=N)", field="--ep")
    order = ring_order(topo.config.system) if topo.config.system is not None else [0]
    return [order[d * ep:(d + 1) * ep] for d in range(dp)]


def drawn_counts(graph: Graph, blocks: list[MoeBlock], ranks: int) -> list[list[list[int]]]:
    """counts[block][rank][expert] of a shape-only model: the model's routing drawn for
    `ranks` × its tokens, rank r taking the r-th slice of the tokens."""
    spec = Routing(**graph.metadata["llm"]["moe"]["routing"])
    out = []
    for b in blocks:
        t = graph.tensors[b.idx].shape[0]
        layer = int(b.prefix.removeprefix("l").rstrip("."))
        choice = expert_choice(spec, t * ranks, b.n_experts, b.top_k, layer)
        out.append([np.bincount(choice[r * t:(r + 1) * t].reshape(-1),
                                minlength=b.n_experts).astype(int).tolist()
                    for r in range(ranks)])
    return out


def data_counts(graph: Graph, blocks: list[MoeBlock], ranks: int,
                inputs: dict[str, np.ndarray]) -> list[list[list[int]]]:
    """counts[block][rank][expert] of a model with weights: the reference interpreter's
    top-k indices on `inputs`, rank r taking the r-th slice of the tokens."""
    from kernbench.ir.interpreter import run

    _, vals = run(graph, inputs, keep_all=True)
    out = []
    for b in blocks:
        idx = np.asarray(vals[b.idx]).astype(np.int64)
        t = idx.shape[0] // ranks
        out.append([np.bincount(idx[r * t:(r + 1) * t].reshape(-1),
                                minlength=b.n_experts).astype(int).tolist()
                    for r in range(ranks)])
    return out


def _blocks(graph: Graph) -> tuple[list[MoeBlock], bool]:
    """(the MoE blocks of `graph`, slice mode: an ONNX model with gathered experts)."""
    blocks = find_blocks(graph)
    if blocks:
        return blocks, False
    return find_gathered(graph), True


def _check(graph: Graph, ep: int) -> tuple[list[MoeBlock], bool]:
    blocks, slice_mode = _blocks(graph)
    if not blocks:
        raise InputError(f"--ep {ep}: the model has no mixture-of-experts layer (a dense "
                         "model); use --tp / --dp", field="--ep")
    for b in blocks:
        check_ep(b.n_experts, ep)
    if slice_mode:
        t = graph.tensors[blocks[0].idx].shape[0]
        if t % ep:
            raise InputError(f"--ep {ep}: the model's {t} tokens do not split into {ep} "
                             "chips", field="--ep")
    return blocks, slice_mode


def _rank_graph(graph: Graph, ep: int, rank: int, counts: list[list[list[int]]],
                slice_mode: bool, qconfig: Path | None) -> EpGraph:
    """Rank `rank`'s graph, its new nodes annotated by the run's QConfig as the
    loaded model's were."""
    g = copy.deepcopy(graph, {id(a): a for a in graph.weights.values()})
    g.weights = dict(g.weights)
    blocks, _ = _blocks(g)
    if slice_mode:
        split_experts(g, blocks)
    eg = ep_graph(g, blocks, ep, rank, counts, slice_tokens=slice_mode)
    apply_qconfig(eg.graph, load_qconfig(qconfig) if qconfig else None)
    return eg


def _site_buffers(eg: EpGraph, state: CompileState) -> list[tuple[int, int, str]]:
    plan = state.memory
    assert plan is not None
    out = []
    for s in eg.sites:
        addrs = [buffer_addr(plan, tid, s.node) for tid in (s.src, s.dst)]
        dtype = plan.placements[s.dst].dtype
        if dtype not in ("bf16", "fp16", "fp32"):
            raise InputError(f"--ep: the all-to-all of '{s.node}' moves {dtype} tensors; "
                             "expert parallelism needs float activations (-q "
                             "examples/qconfig/bf16.yaml)", field="--ep")
        out.append((addrs[0], addrs[1], dtype))
    return out


def _inputs(graph: Graph, opts: RunOptions) -> dict[str, np.ndarray]:
    """The inputs the run's data pass uses (--inputs, or the seeded ones)."""
    return load_inputs(opts.inputs, graph, strict=opts.strict)


def run_ep(model: Path, topo: Topology, out: Path, opts: RunOptions,
           hooks: RunHooks) -> SimResult:
    """`run_model` with `opts.ep` (and `opts.dp`); see the module docstring."""
    ep, dp = opts.ep, opts.dp
    if opts.tp != 1:
        raise InputError(f"--ep {ep} with --tp {opts.tp}: tensor-parallel attention under "
                         "expert parallelism is not built (docs/multichip.md)", field="--ep")
    if opts.dump_intermediates:
        raise InputError("--dump-intermediates with --ep: a rank's layers hold parts of "
                         "the model's tensors", field="--ep")
    groups = ep_chips(topo, ep, dp)
    chips = [c for g in groups for c in g]
    ranks = ep * dp
    graph, source = load_model(Path(model), opts.qconfig)
    blocks, slice_mode = _check(graph, ep)
    _refuse(opts, ep, dp, slice_mode)
    counts = (data_counts(graph, blocks, ep, _inputs(graph, opts)) if slice_mode
              else drawn_counts(graph, blocks, ranks))
    plan, small = (None, graph) if slice_mode else _replay(graph, opts, hooks)
    if plan is not None:
        _keep_experts(small, graph)
    bundle = opts.bundle or Path(out) / "bundle"
    req = CompileRequest(calib_inputs=opts.inputs, strict=opts.strict,
                         qconfig_file=str(opts.qconfig) if opts.qconfig else None,
                         model_file=opts.source or str(model), write_cmdq=False,
                         all_pes=opts.all_pes)
    rk = _compile_ranks(small, source, counts if plan is None else
                        drawn_counts(small, find_blocks(small), ranks), ep, ranks, slice_mode,
                        opts, bundle, req, chip_topology(topo), hooks)
    programs, sites, rank_graphs = rk.programs, rk.sites, rk.graphs
    high, rank_bundles, aliases = rk.high, rk.bundles, rk.aliases
    merged = merge_ep_programs(programs, sites, topo, groups, limits_for(topo),
                               scratch_base=-(-high // 4096) * 4096, aliases=aliases)
    del programs, rk
    meta = {"version": CMDQ_VERSION, "graph_name": graph.metadata.get("model_name", "model"),
            "generated_by": "kernbench.compiler.parallel", "topology": topo.name}
    hooks.note(f"--ep {ep} --dp {dp}: chips {groups}, {len(sites)} collective(s) per rank "
               f"({merged.collective_entries} of {len(merged.entries)} CMDQ entries)")
    if opts.verify:
        write_ep_bundle(bundle, graph, rank_graphs, rank_bundles, chips, topo,
                        [dict(e) for e in merged.entries], meta)
    elif opts.write_cmdq:
        (bundle / "cmdq.json").write_text(json.dumps({"cmdq": merged.entries,
                                                      "metadata": meta}), encoding="utf-8")
    prog = parse_entries(merged.entries, meta, file=str(bundle / "cmdq.json"))
    moe = ep_moe_section(blocks, counts, ep, dp, graph, sites)
    section = {"ep": ep, "dp": dp, "chips": groups, "collectives_per_rank": len(sites),
               "collective_entries": merged.collective_entries,
               "token_slices": slice_mode}
    facts = _facts(rank_graphs if plan is None else
                   [_rank_graph(graph, ep, r % ep, [b[r // ep * ep:(r // ep + 1) * ep]
                                                    for b in counts], False, opts.qconfig).graph
                    for r in range(ranks)])

    def post(stats: Stats, spans: dict, actions_of: Any) -> Stats:
        if plan is not None:
            stats = apply_replay(stats, rank_graphs[0], plan, spans, topo, actions_of)
            set_precision(stats, run_precision(graph))
        if facts is not None and (opts.llm or is_shape_only(graph)):
            set_section(stats, "llm", llm_section(facts, stats, topo))
        set_section(stats, "parallel", section)
        set_section(stats, "moe", moe)
        return stats

    return simulate_merged(bundle, topo, out, opts, hooks, post, prog, "--ep")


def _keep_experts(small: Graph, graph: Graph) -> None:
    """The experts' weights a truncated graph dropped (no local token chose them; another
    chip's may): back from the whole graph."""
    for b in find_blocks(small):
        for e in range(b.n_experts):
            for part in ("gate", "up", "down"):
                tid = b.weight(e, part)
                if tid not in small.tensors:
                    small.tensors[tid] = graph.tensors[tid].model_copy(deep=True)
                    small.weights[tid] = graph.weights[tid]


@dataclass
class _Ranks:
    """The ranks' compiled programs and what the merge and the bundle need of them."""

    programs: list[list[dict[str, Any]]] = field(default_factory=list)
    sites: list[EpSiteBuffers] = field(default_factory=list)
    graphs: list[Graph] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)
    aliases: dict[str, int] = field(default_factory=dict)
    high: int = 0


def _compile_ranks(graph: Graph, source: Path | None, counts: list[list[list[int]]], ep: int,
                   ranks: int, slice_mode: bool, opts: RunOptions, bundle: Path,
                   req: CompileRequest, chip: Topology, hooks: RunHooks) -> _Ranks:
    """Every rank's graph compiled for one chip (rank r's bundle beside rank 0's,
    `<bundle>.ep<r>`); with --verify the ranks' names are made unique (host.ep_bundle)."""
    out = _Ranks()
    bufs: list[list[tuple[int, int, str]]] = []
    eg = None
    for r in range(ranks):
        group, c = divmod(r, ep)
        eg = _rank_graph(graph, ep, c, [blk[group * ep:(group + 1) * ep] for blk in counts],
                         slice_mode, opts.qconfig)
        if opts.verify:
            eg = rename_rank(eg, r)
            out.aliases.update({s.node: k for k, s in enumerate(eg.sites)})
        rb = bundle if r == 0 else bundle.parent / f"{bundle.name}.ep{r}"
        out.bundles.append(rb)
        state, _ = compile_loaded(eg.graph, source, chip, rb, req,
                                  hooks.compile_progress if r == 0 else None)
        bufs.append(_site_buffers(eg, state))
        out.high = max(out.high, _high_water(state))
        assert state.cmdq is not None
        out.programs.append(state.cmdq.entries)
        out.graphs.append(eg.graph)
        state.cmdq = state.tiles = state.memory = None
    assert eg is not None
    out.sites = [EpSiteBuffers(s, tuple(b[k][0] for b in bufs), tuple(b[k][1] for b in bufs),
                               bufs[0][k][2]) for k, s in enumerate(eg.sites)]
    return out


def _refuse(opts: RunOptions, ep: int, dp: int, slice_mode: bool) -> None:
    if opts.verify and not slice_mode:
        raise InputError("--verify with --ep checks an ONNX MoE model with gathered "
                         "experts (a shape-only model has no values)", field="--ep")
    if slice_mode and dp > 1:
        raise InputError(f"--ep with --dp {dp}: an ONNX model's tokens are split over the "
                         "--ep chips only", field="--dp")


def _facts(graphs: list[Graph]):  # noqa: ANN202
    """The LLM facts of the whole step: the ranks' added up (each holds its attention
    weights and its own experts, runs its own tokens and KV cache)."""
    import dataclasses

    fs = [llm_facts(g) for g in graphs]
    if any(f is None for f in fs):
        return None
    f0 = fs[0]
    assert f0 is not None
    total = {k: sum(getattr(f, k) for f in fs if f is not None)
             for k in ("batch", "macs", "params", "weight_bytes", "kv_cache_bytes",
                       "step_read_bytes")}
    return dataclasses.replace(f0, **total)
