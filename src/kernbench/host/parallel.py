"""`kernbench run --tp N --dp M`: tensor- and data-parallel runs over the chips of a
multi-chip topology (docs/multichip.md).

Each rank's graph (`compiler.parallel.shard_graph`) is compiled for one chip (the
topology's chip without its `system:` section); a model with weight values is compiled
rank by rank (each rank's weights differ), a shape-only model once (its ranks' graphs are
identical: same shapes, no values, so their programs are too) and that program placed on
every chip. `compiler.parallel.merge_programs` makes the one multi-chip program with the
all-reduces (and the LM head's all-gather) between them, which is simulated on the whole
topology; with `--verify` the data pass runs it on every chip's weights and the outputs
(chip 0's logits) are checked against the unsplit model. A shape-only model's run that
keeps nothing per entry does not hold that program: rank 0's program is compiled layer by
layer and merged for every chip as it is read (`compiler.parallel.lockstep`), the same
entries.

With `--dp M` there are M replicas of those N chips, each running the model on batch / M
sequences (the CLI builds or binds the model at that batch); the replicas share no
collective, so their programs are the same program on other chips. The LLM figures count
the whole batch.

Block replay (host.block_replay) works as on one chip: the ranks' graphs are truncated to
the simulated blocks before they are compiled.
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
from kernbench.cmdq.schema import CMDQ_VERSION, CmdqProgram
from kernbench.cmdq.stream import streamed_program
from kernbench.compiler.hbm import MemoryPlan
from kernbench.compiler.parallel import TpGraph, shard_graph
from kernbench.compiler.parallel.lockstep import LockstepMerge, RankShape
from kernbench.compiler.parallel.tp_program import SiteBuffers, merge_programs
from kernbench.compiler.pipeline import load_model
from kernbench.compiler.state import CompileState
from kernbench.errors import InputError, warn
from kernbench.host import compile_ahead
from kernbench.host.block_replay import (
    ReplayCheckFailed,
    ReplayPlan,
    apply_replay,
    plan_replay,
    truncate_blocks,
)
from kernbench.host.chunked_compile import compile_chunks
from kernbench.host.flow import (
    CompileRequest,
    PostStats,
    Progress,
    SimOptions,
    SimResult,
    compile_loaded,
    simulate_bundle,
)
from kernbench.host.llm import LlmFacts, check_fit, llm_facts, llm_section
from kernbench.host.precision import run_precision
from kernbench.host.replay_figures import ActionsOf
from kernbench.host.run import RunHooks, RunOptions
from kernbench.ir.bundle_ir import save_bundle_ir
from kernbench.ir.model import Graph, is_shape_only, load_weights, save_weights
from kernbench.report.stats import Stats, set_precision, set_section
from kernbench.topology import build_topology
from kernbench.topology.chips import ring_order
from kernbench.topology.model import Topology


def chip_topology(topo: Topology) -> Topology:
    """One chip of `topo`: its SIP, without the `system:` section."""
    cfg = topo.config
    sip = cfg.sip.model_copy(update={"count": 1})
    return build_topology(cfg.model_copy(update={"sip": sip, "system": None}))


@dataclass(frozen=True)
class Parallel:
    """--tp / --dp as checked: `batch` is what one replica runs (None: the model's)."""

    tp: int = 1
    dp: int = 1
    batch: int | None = None
    ep: int = 1


def check_parallel(tp: int | None, dp: int | None, batch: int | None) -> Parallel:
    """--tp / --dp against each other and the batch (one line naming the value, exit 2);
    the chips are checked against the topology by `parallel_chips`."""
    tp, dp = 1 if tp is None else tp, 1 if dp is None else dp
    for flag, v in (("--tp", tp), ("--dp", dp)):
        if v < 1:
            raise InputError(f"{flag} {v} must be at least 1", field=flag)
    if dp > 1:
        if batch is None:
            raise InputError(f"--dp {dp} splits the batch between replicas: give --batch "
                             f"(a multiple of {dp})", field="--dp")
        if batch % dp:
            raise InputError(f"--dp {dp}: batch {batch} does not split into {dp} replicas",
                             field="--dp")
        batch //= dp
    return Parallel(tp, dp, batch)


def parallel_chips(topo: Topology, tp: int, dp: int = 1) -> list[list[int]]:
    """The chips of each replica, its tensor-parallel ranks in order: consecutive runs of
    the topology's ring order (each chip a neighbour of the next). Bad input: one line
    naming the value, exit 2."""
    need = tp * dp
    if need > topo.chips:
        what = f"--tp {tp}" if dp == 1 else f"--dp {dp}" if tp == 1 else \
            f"--tp {tp} × --dp {dp} = {need} chips"
        raise InputError(f"{what}: the topology '{topo.name}' has {topo.chips} chip(s) "
                         "(a multi-chip preset such as t3k or large-x8, or --set "
                         "system.chips=N)", field="--tp" if dp == 1 else "--dp")
    order = ring_order(topo.config.system) if topo.config.system is not None else [0]
    return [order[d * tp:(d + 1) * tp] for d in range(dp)]


def buffer_addr(plan: MemoryPlan, tid: str, node: str) -> int:
    """The HBM address of collective buffer `tid` of node `node`: one contiguous storage."""
    p = plan.placements.get(tid)
    if p is None or p.parts or not p.contiguous:
        raise ValueError(f"collective buffer '{tid}' of '{node}' is not one contiguous storage")
    return p.addr


def _site_buffers(tg: TpGraph, state: CompileState) -> list[SiteBuffers]:
    plan = state.memory
    assert plan is not None
    out = []
    for s in tg.sites:
        bufs = [buffer_addr(plan, tid, s.node) for tid in (s.src, s.dst)]
        t = tg.graph.tensors[s.dst]
        dtype = plan.placements[s.dst].dtype
        if dtype not in ("bf16", "fp16", "fp32"):
            raise InputError(f"--tp: the collective after '{s.node}' moves {dtype} "
                             "tensors; collectives move bf16, fp16 or fp32", field="--tp")
        out.append(SiteBuffers(s, bufs[0], bufs[1], math.prod(t.shape), dtype))
    return out


def _high_water(state: CompileState) -> int:
    plan = state.memory
    assert plan is not None
    return max((hi for a in plan.allocations.values() for _, hi in a.spans()), default=0)


def _compile_ranks(graph: Graph, source: Path | None, tp: int, chip: Topology,
                   bundle: Path, req: CompileRequest, progress: Progress | None
                   ) -> tuple[list[list[dict[str, Any]]], list[SiteBuffers], int]:  # fmt: skip
    """Every tensor-parallel rank's entries (a shape-only model: rank 0's, shared), the
    sites' buffers (the same offsets on every rank) and the memory plans' high-water
    mark. Rank r > 0's bundle goes beside rank 0's (`<bundle>.tp<r>`)."""
    ranks = 1 if is_shape_only(graph) else tp
    programs = []
    sites: list[SiteBuffers] | None = None
    high = 0
    for r in range(ranks):
        tg = shard_graph(graph, tp, r)
        out = bundle if r == 0 else bundle.parent / f"{bundle.name}.tp{r}"
        state, _ = compile_loaded(tg.graph, source, chip, out, req,
                                  progress if r == 0 else None)
        bufs = _site_buffers(tg, state)
        if sites is not None and [(b.src, b.dst, b.count) for b in bufs] != \
                [(b.src, b.dst, b.count) for b in sites]:
            raise ValueError("the ranks' collective buffers differ")
        sites = bufs
        high = max(high, _high_water(state))
        assert state.cmdq is not None
        programs.append(state.cmdq.entries)
        state.cmdq = state.tiles = state.memory = None
    assert sites is not None
    return programs * (tp // ranks), sites, high


def _scratch_base(high: int) -> int:
    """Where the collectives' scratch starts: above the memory plans' high-water mark."""
    return -(-high // 4096) * 4096


def _lockstep(graph: Graph, source: Path | None, topo: Topology, groups: list[list[int]],
              bundle: Path, req: CompileRequest, hooks: RunHooks, meta: dict[str, Any]
              ) -> tuple[CmdqProgram, list[SiteBuffers], int]:  # fmt: skip
    """A shape-only model's merged program as it streams (`compiler.parallel.lockstep`):
    rank 0's program, compiled layer by layer, merged for every chip of `groups` while
    the chips' command processors read it. (the program, the sites, collective entries)"""
    tp = len(groups[0])
    tg = shard_graph(graph, tp, 0)
    rank = compile_chunks(tg.graph, source, chip_topology(topo), bundle, req,
                          hooks.compile_progress)
    sites = _site_buffers(tg, rank.state)
    limits = limits_for(topo)
    merge = LockstepMerge(RankShape(rank.entries, rank.layer_order, rank.layer_entries),
                          sites, topo, groups, limits, _scratch_base(_high_water(rank.state)))
    stream = compile_ahead.entry_stream(merge.chunks(rank.chunks), merge.entries,
                                        merge.layer_entries, limits, str(bundle / "cmdq.json"),
                                        in_child=req.ahead, pes=merge.entry_pes,
                                        topology=topo)
    return streamed_program(stream, meta), sites, merge.collective_entries


def _write_tp_bundle(bundle: Path, graph: Graph, tp: int, chips: list[int], topo: Topology,
                     entries: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """The bundle of a parallel run (`--verify`, `--keep-bundle`): the merged cmdq.json,
    the unsplit ir.json (the reference the outputs are checked against), every chip's
    weights in memory.json and weights.npz (rank t's, at its chip's addresses; the first
    chip's under their own keys, chip c's under `chip<c>/`), the inputs copied to every
    chip. `chips`: the chips of every replica in order, tensor-parallel rank i % tp."""
    per_cubes = len(topo.cubes) // topo.chips
    bases = [topo.cubes[c * per_cubes].hbm_base for c in range(topo.chips)]
    mem = json.loads((bundle / "memory.json").read_text(encoding="utf-8"))
    weights = load_weights(bundle / "weights.npz")

    def shift(a: dict[str, Any], off: int) -> dict[str, Any]:
        b = dict(a)
        b["address"] = a["address"] + off
        b["replicas"] = [x + off for x in a["replicas"]]
        if a.get("parts"):
            b["parts"] = [[o, nb, addr + off] for o, nb, addr in a["parts"]]
        return b

    ranks = [(mem["tensors"], weights)]
    for t in range(1, tp):
        rb = bundle.parent / f"{bundle.name}.tp{t}"
        ranks.append((json.loads((rb / "memory.json").read_text(encoding="utf-8"))["tensors"],
                      load_weights(rb / "weights.npz")) if rb.exists() else ranks[0])
    tensors: dict[str, Any] = {}
    for i, chip in enumerate(chips):
        rt, rw = ranks[i % tp]
        for key, a in rt.items():
            if key in graph.inputs:  # every chip reads its own copy of the inputs
                if a.get("parts"):
                    raise InputError(f"input '{key}' is placed once, spread over the cubes (a "
                                     "model larger than a cube), so the bundle of a --tp run "
                                     "cannot give every chip its copy", field="--tp")
                if i == 0:
                    tensors[key] = dict(a)
                    tensors[key]["replicas"] = [x + bases[c] for c in chips
                                                for x in (a["replicas"] or [a["address"]])]
                    tensors[key]["address"] = tensors[key]["replicas"][0]
                continue
            if i == 0:
                tensors[key] = shift(a, bases[chip])
            elif key in rw:
                tensors[f"chip{chip}/{key}"] = shift(a, bases[chip])
                weights[f"chip{chip}/{key}"] = rw[key]
    mem["tensors"] = tensors
    for v in mem["views"].values():
        if bases[chips[0]]:
            v["address"] += bases[chips[0]]
            if v.get("parts"):
                v["parts"] = [[o, nb, addr + bases[chips[0]]] for o, nb, addr in v["parts"]]
    mem["views"] = {t: v for t, v in mem["views"].items() if t in graph.tensors}
    (bundle / "memory.json").write_text(json.dumps(mem, indent=1, sort_keys=True),
                                        encoding="utf-8")
    save_weights(weights, bundle / "weights.npz")
    save_bundle_ir(graph, bundle)  # every weight (no listing)
    doc = {"cmdq": entries, "metadata": meta}
    (bundle / "cmdq.json").write_text(json.dumps(doc), encoding="utf-8")


def _facts(graph: Graph, dp: int) -> LlmFacts | None:
    """The LLM facts of the whole step: a replica's times `dp` (batch, MACs, the weights
    every replica holds and reads, the KV cache)."""
    f = llm_facts(graph)
    if f is None or dp == 1:
        return f
    return dataclasses.replace(f, batch=f.batch * dp, macs=f.macs * dp,
                               weight_bytes=f.weight_bytes * dp,
                               kv_cache_bytes=f.kv_cache_bytes * dp,
                               step_read_bytes=f.step_read_bytes * dp)


def _refuse_unverifiable(graph: Graph, opts: RunOptions) -> None:
    tp, dp = opts.tp, opts.dp
    if not opts.verify and not opts.dump_intermediates:
        return
    if opts.dump_intermediates:
        raise InputError("--dump-intermediates with --tp/--dp: a rank's layers hold parts "
                         "of the model's tensors", field="--tp")
    if dp > 1:
        raise InputError(f"--verify with --dp {dp}: the replicas run different inputs; "
                         "verify with --tp alone", field="--dp")
    if any(i in shard_graph(graph, tp, 0).split_inputs for i in graph.inputs):
        raise InputError(f"--verify with --tp {tp}: the model's KV-cache inputs are split "
                         "by head; verify a prefill model (no past keys/values)",
                         field="--tp")


def _replay(graph: Graph, opts: RunOptions, hooks: RunHooks
            ) -> tuple[ReplayPlan | None, Graph]:  # fmt: skip
    """(the replay plan or None, the graph the ranks are split from)."""
    if opts.exact or opts.verify:
        return None, graph
    plan, why = plan_replay(graph, opts.replay_blocks)
    if plan is None:
        if graph.metadata.get("llm"):
            hooks.note(f"simulating every layer: {why}")
        return None, graph
    hooks.note(f"replay: {plan.blocks} identical blocks; simulating {plan.simulated} "
               "and replaying the rest (--exact simulates all)")
    return plan, truncate_blocks(graph, plan.simulated)


def run_parallel(model: Path, topo: Topology, out: Path, opts: RunOptions,
                 hooks: RunHooks) -> SimResult:
    """`run_model` with `opts.tp` / `opts.dp` (see the module docstring); `opts`/`hooks`
    are host.run's RunOptions / RunHooks."""
    tp, dp = opts.tp, opts.dp
    groups = parallel_chips(topo, tp, dp)
    chips = [c for g in groups for c in g]
    graph, source = load_model(Path(model), opts.qconfig)
    facts = _facts(graph, dp)
    if facts is not None:
        for w in check_fit(facts, topo):
            warn(w)
    _refuse_unverifiable(graph, opts)
    plan, compiled = _replay(graph, opts, hooks)
    bundle = opts.bundle or Path(out) / "bundle"
    req = CompileRequest(calib_inputs=opts.inputs, strict=opts.strict,
                         qconfig_file=str(opts.qconfig) if opts.qconfig else None,
                         model_file=opts.source or str(model), write_cmdq=False,
                         all_pes=opts.all_pes,
                         ahead=opts.compile_ahead)
    meta = {"version": CMDQ_VERSION, "graph_name": graph.metadata.get("model_name", "model"),
            "generated_by": "kernbench.compiler.parallel", "topology": topo.name}
    if is_shape_only(compiled) and not (opts.trace or opts.report or opts.verify
                                        or opts.write_cmdq or opts.entries):
        # nothing per entry is kept and every rank runs one program: merged as it streams
        prog, sites, collective_entries = _lockstep(compiled, source, topo, groups, bundle,
                                                    req, hooks, meta)
    else:
        programs, sites, high = _compile_ranks(compiled, source, tp, chip_topology(topo),
                                               bundle, req, hooks.compile_progress)
        merged = merge_programs(programs * dp, sites, topo, groups, limits_for(topo),
                                scratch_base=_scratch_base(high))
        del programs
        collective_entries = merged.collective_entries
        if opts.verify or opts.write_cmdq:
            _write_tp_bundle(bundle, graph, tp, chips, topo,
                             [dict(e) for e in merged.entries], meta)
        prog = parse_entries(merged.entries, meta, file=str(bundle / "cmdq.json"))
    hooks.note(f"--tp {tp} --dp {dp}: chips {groups}, {len(sites)} collective(s) per rank "
               f"({collective_entries} of {len(prog.cmdq)} CMDQ entries)")
    section = {"tp": tp, "dp": dp, "chips": groups, "collectives_per_rank": len(sites),
               "collective_entries": collective_entries,
               "collectives": [{"layer": s.site.node, "op": s.site.op, "count": s.count,
                                "dtype": s.dtype} for s in sites[:4]]}

    def post(stats: Stats, spans: dict, actions_of: ActionsOf) -> Stats:
        if plan is not None:
            stats = apply_replay(stats, compiled, plan, spans, topo, actions_of)
            set_precision(stats, run_precision(graph))
        if facts is not None and (opts.llm or graph.metadata.get("shape_only")):
            set_section(stats, "llm", llm_section(facts, stats, topo))
        set_section(stats, "parallel", section)
        return stats

    return simulate_merged(bundle, topo, out, opts, hooks, post, prog, "--tp")


def simulate_merged(bundle: Path, topo: Topology, out: Path, opts: RunOptions,
                    hooks: RunHooks, post: PostStats, prog: CmdqProgram, flag: str) -> SimResult:
    """Simulate a multi-chip run's merged program `prog` the way `run` simulates one chip's,
    `post` adding the run's sections; a failed replay check is bad input naming `flag`."""
    try:
        return simulate_bundle(bundle, topo, Path(out), SimOptions(
            verify=opts.verify, inputs=opts.inputs, trace=opts.trace, report=opts.report,
            strict=opts.strict, save_oplog=opts.save_oplog, entries=opts.entries),
            hooks.sim_hooks(post), prog)
    except ReplayCheckFailed as e:
        raise InputError(f"the replay check failed ({e}); run with --exact",
                         field=flag) from None
