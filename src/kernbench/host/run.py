"""`kernbench run` as a flow: load → LLM fit check → (replay plan) → compile → simulate →
stats with the LLM figures → report.

Replay (`host.block_replay`) is used only when it is proven on this model: the graph marks ≥ 4
identical blocks, no data pass is asked for (`verify`), `exact` is off, and after the
simulation the last two block periods agree within 1 %; otherwise the whole model is
compiled and simulated.

The compiled program goes to the simulator in memory (`host.flow.program_of`): the bundle's
cmdq.json is written only when asked (`RunOptions.write_cmdq`, `--keep-bundle`; always with
`verify`) and never read back, so a real-size program's file neither costs the time to
write and parse it nor meets the CMDQ file-size limit. The same holds for the bundle's
weights, IR weights and model copy (`RunOptions.write_weights`): a timing-only simulation
reads none of them, and they are as large as the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernbench.cmdq.schema import CmdqProgram
from kernbench.common.program import LayerSpan
from kernbench.compiler.pe_choice import PeChoice
from kernbench.compiler.pipeline import load_model
from kernbench.errors import warn
from kernbench.host.block_detect import mark_blocks
from kernbench.host.block_replay import (
    SIMULATED_BLOCKS,
    ReplayCheckFailed,
    apply_replay,
    plan_replay,
    truncate_blocks,
)
from kernbench.host.flow import (
    CompileRequest,
    PostStats,
    Progress,
    SimHooks,
    SimOptions,
    SimResult,
    compile_for_run,
    compile_loaded,
    program_of,
    simulate_bundle,
)
from kernbench.host.llm import check_fit, llm_facts, llm_section
from kernbench.host.moe_stats import moe_section
from kernbench.host.precision import run_precision
from kernbench.host.replay_figures import ActionsOf
from kernbench.host.simulate import PhaseHook, WatchHook
from kernbench.ir.model import Graph
from kernbench.report.stats import Stats, set_precision, set_section
from kernbench.topology.model import Topology


@dataclass(frozen=True)
class RunOptions:
    qconfig: Path | None = None
    verify: bool = False
    inputs: Path | None = None
    dump_intermediates: bool = False
    trace: bool = True
    report: bool = True
    exact: bool = False
    llm: bool = False     # the `llm` stats section for any model with attention
    save_oplog: Path | None = None
    strict: bool = False  # suspicious inputs (NaN/Inf, unmatched QConfig globs) are errors
    bundle: Path | None = None  # where the bundle goes (default: out/bundle)
    # cmdq.json in the bundle: the run simulates the program from memory, so the file is
    # only for a bundle someone keeps (with `verify` it is always written: the data pass
    # loads the whole bundle)
    write_cmdq: bool = True
    # weights.npz, ir_weights.npz and the model copy in the bundle: read by the data pass
    # and the verification only, so only for a bundle someone keeps (always with `verify`)
    write_weights: bool = True
    all_pes: bool = False  # spread over every PE, even a model the cost model keeps on fewer
    entries: bool = False  # per-entry detail (timeline, entry rows) whatever the size
    tp: int = 1  # tensor parallelism over this many chips (host.parallel.run_parallel)
    dp: int = 1  # replicas (each on `tp` chips), the batch split between them
    ep: int = 1  # expert parallelism over this many chips (host.ep.run_ep)
    pp: int = 1  # pipeline stages (host.pipeline.run_pipeline)
    micro_batches: int = 1  # a replica's batch split between the pipeline's micro-batches
    replay_blocks: int = SIMULATED_BLOCKS  # blocks a replayed run simulates (≥ 3)
    # the program compiled by this run is validated against the topology's limits before
    # it is simulated (False: trusted, as a serving run's many step programs are)
    check_compiled: bool = True
    # a streamed program is compiled in a child process while this one simulates
    # (host.compile_ahead; the same outputs, on two CPUs instead of one)
    compile_ahead: bool = False
    # the model as the user named it, for diagnostics (default: the file compiled, which
    # for an ONNX model with bound dims is a temporary copy)
    source: str | None = None


@dataclass(frozen=True)
class RunHooks:
    """How the flow talks to its caller (the CLI): notes on stderr, compile progress,
    simulation progress (see host.simulate.simulate_program's `watch`)."""

    note: Callable[[str], None] = print
    compile_progress: Progress | None = None
    watch: WatchHook | None = None
    phase: PhaseHook | None = None  # a context manager per long phase (progress display)

    def sim_hooks(self, post_stats: PostStats | None = None) -> SimHooks:
        return SimHooks(phase=self.phase, watch=self.watch, post_stats=post_stats)


def run_model(model: Path, topo: Topology, out: Path, opts: RunOptions,
              hooks: RunHooks | None = None) -> SimResult:
    """Compile, simulate and report `model` (a file resolve_model produced) on `topo`."""

    hooks = hooks or RunHooks()
    graph, source = load_model(Path(model), opts.qconfig)
    facts = llm_facts(graph)
    if facts is not None:
        for w in check_fit(facts, topo):
            warn(w)  # a warning: kept with --quiet (docs/errors.md)
    plan = None
    marked = graph  # the graph whose block marks the replay uses
    if not (opts.exact or opts.verify):
        plan, why = plan_replay(graph, opts.replay_blocks)
        if plan is None and not any("block" in n.metadata for n in graph.nodes):
            # an ONNX import marks no blocks: find them, proven identical (host.block_detect)
            found, why_not = mark_blocks(graph)
            if found is not None:
                marked = found
                plan, why = plan_replay(found, opts.replay_blocks)
            else:
                why = why_not
        if plan is None and graph.metadata.get("llm"):
            hooks.note(f"simulating every layer: {why}")
    bundle = opts.bundle or Path(out) / "bundle"
    write_cmdq = opts.write_cmdq or opts.verify
    write_weights = opts.write_weights or opts.verify

    def finished(small: Graph, choice: PeChoice | None) -> PostStats:
        """The stats of `small` (the model, or its simulated blocks) made final."""
        if choice is not None and choice.pes < choice.of:
            hooks.note(choice.note())

        def post(stats: Stats, spans: dict[str, LayerSpan], actions_of: ActionsOf) -> Stats:
            if choice is not None:
                set_section(stats, "pe_choice", choice.to_json())
            if plan is not None:
                stats = apply_replay(stats, small, plan, spans, topo, actions_of)
                set_precision(stats, run_precision(graph))  # every layer, not the simulated
            # shape-only models always get the section; others on request (--llm), so that
            # the stats of existing runs stay byte-identical
            if facts is not None and (opts.llm or graph.metadata.get("shape_only")):
                set_section(stats, "llm", llm_section(facts, stats, topo))
            if (moe := moe_section(graph)) is not None:
                set_section(stats, "moe", moe)
            return stats
        return post

    req = CompileRequest(calib_inputs=opts.inputs, strict=opts.strict,
                         qconfig_file=str(opts.qconfig) if opts.qconfig else None,
                         model_file=opts.source or str(model), write_cmdq=write_cmdq,
                         write_weights=write_weights, all_pes=opts.all_pes,
                         ahead=opts.compile_ahead)
    if plan is not None:
        small = truncate_blocks(marked, plan.simulated)
        hooks.note(f"replay: {plan.blocks} identical blocks; simulating {plan.simulated} "
                   "and replaying the rest (--exact simulates all)")
        prog, choice = _program(small, None, topo, bundle, req, False, hooks)  # whole
        try:
            return _simulate(bundle, topo, out, opts, hooks, finished(small, choice), prog)
        except ReplayCheckFailed as e:
            hooks.note(f"replay check failed ({e}): simulating every layer")
            plan = None
    keeps = opts.trace or opts.report or opts.verify or write_cmdq or opts.entries  # per entry
    prog, choice = _program(graph, source, topo, bundle, req, not keeps, hooks)
    return _simulate(bundle, topo, out, opts, hooks, finished(graph, choice), prog)


def _program(graph: Graph, source: Path | None, topo: Topology, bundle: Path,
             req: CompileRequest, stream: bool, hooks: RunHooks
             ) -> tuple[CmdqProgram, PeChoice | None]:  # fmt: skip
    """(the compiled program, the PE choice or None): streamed layer by layer while it runs
    (and compiled ahead with `req.ahead`) when `stream` (nothing per entry is kept), else
    compiled whole; the tile graph and memory plan are not kept to simulate."""
    if stream:
        return compile_for_run(graph, source, topo, bundle, req, hooks.compile_progress)
    state, _ = compile_loaded(graph, source, topo, bundle, req, hooks.compile_progress)
    return program_of(state, str(bundle / "cmdq.json")), state.pe_choice


def _simulate(bundle: Path, topo: Topology, out: Path, opts: RunOptions, hooks: RunHooks,
              post: PostStats, prog: CmdqProgram) -> SimResult:
    """Simulate the compiled program `prog` (in memory; a streamed run consumes it)."""
    return simulate_bundle(bundle, topo, Path(out), SimOptions(
        verify=opts.verify, inputs=opts.inputs, dump_intermediates=opts.dump_intermediates,
        trace=opts.trace, report=opts.report, save_oplog=opts.save_oplog,
        strict=opts.strict, entries=opts.entries, check_prog=opts.check_compiled),
        hooks.sim_hooks(post), prog)
