"""The end-to-end flows the CLI exposes: compile a model, simulate a bundle (with the data
pass and verification on request), and run = compile + simulate + report (+ verify)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import MAX_CMDQ_BYTES, load_program, parse_entries
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.stream import streamed_program
from kernbench.common.gc_pause import gc_paused
from kernbench.common.program import LayerSpan
from kernbench.compiler import pe_choice
from kernbench.compiler.cost import estimate_program
from kernbench.compiler.emit import cmdq_metadata
from kernbench.compiler.inputs import default_inputs, vocab_size
from kernbench.compiler.layer_ops import LayerOpCensus, layer_op_census
from kernbench.compiler.lower.activation import widened_weights_note
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pe_choice import PeChoice, compile_on_best_pes, structure_copy
from kernbench.compiler.pipeline import compile_graph, load_model, write_bundle
from kernbench.compiler.roofline import layer_report
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.compiler.stream import compile_streamed
from kernbench.errors import (
    MAX_JSON_BYTES,
    MAX_MODEL_BYTES,
    InputError,
    check_input_file,
    read_input_text,
    warn,
)
from kernbench.host import compile_ahead
from kernbench.host.bundle import Bundle, run_with_data
from kernbench.host.bundle_check import check_bundle
from kernbench.host.estimate import graph_bytes, refuse_above_limit
from kernbench.host.intermediates import Intermediates
from kernbench.host.precision import add_precision
from kernbench.host.replay_figures import ActionsOf
from kernbench.host.simulate import CmdqRun, PhaseHook, WatchHook, simulate_program
from kernbench.host.verify import Verdict, verify_outputs
from kernbench.ir.model import Graph, is_shape_only, save_weights
from kernbench.ir.qconfig import parse_qconfig, unmatched_overrides
from kernbench.numerics.dtypes import np_dtype
from kernbench.report.html import write_report
from kernbench.report.layers_csv import write_layers_csv
from kernbench.report.result_text import summary_text
from kernbench.report.stats import (
    LayerEstimateFigures,
    Stats,
    set_estimate,
    set_layer_figures,
    set_layers,
    set_token_energy,
    write_json,
)
from kernbench.topology.model import Topology


@dataclass
class SimResult:
    stats: Stats
    verdict: Verdict | None = None
    outputs: dict[str, np.ndarray] | None = None
    written: list[Path] | None = None


#: `progress(description)`: the pass now running (compile progress display)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompileRequest:
    """What a compile is asked for besides the model and the NPU: `qconfig` (a QConfig
    YAML; `qconfig_file` names it in diagnostics when the graph was loaded already),
    `dump_after` (pass names whose state is written), activation scales calibrated on
    `calib_inputs` (an .npz keyed by input name; default seeded random inputs), `strict`
    (suspicious input refused instead of warned), `all_pes` (spread over every PE),
    `write_cmdq` (cmdq.json in the bundle), `write_weights` (its weights and model copy:
    `pipeline.write_bundle`), `model_file` (the name in diagnostics), `ahead` (below)."""

    qconfig: Path | None = None
    dump_after: tuple[str, ...] = ()
    calib_inputs: Path | None = None
    strict: bool = False
    all_pes: bool = False
    write_cmdq: bool = True
    write_weights: bool = True
    model_file: str | None = None
    qconfig_file: str | None = None
    ahead: bool = False  # a streamed program compiled in a child process (host.compile_ahead)


@gc_paused()  # a whole program's objects live until it is written (common.gc_pause)
def compile_model(model: Path, topology: Topology, out: Path,
                  req: CompileRequest = CompileRequest(),
                  progress: Progress | None = None) -> tuple[CompileState, PassManager | None]:
    """Compile; suspicious input (a QConfig glob that matches no layer, NaN/Inf weights)
    warns, or with `req.strict` is refused."""
    graph, source = load_model(Path(model), req.qconfig)
    return compile_loaded(graph, source, topology, out, replace(
        req, qconfig_file=str(req.qconfig) if req.qconfig else None,
        model_file=req.model_file or str(model)), progress)


@gc_paused()
def compile_loaded(graph: Graph, source: Path | None, topology: Topology, out: Path,
                   req: CompileRequest = CompileRequest(), progress: Progress | None = None
                   ) -> tuple[CompileState, PassManager | None]:  # fmt: skip
    """compile_model for a graph already loaded (or built, or truncated for replay);
    `write_cmdq` False leaves cmdq.json out of the bundle (see `program_of`). A small
    model may be compiled for fewer PEs than the topology has (`compiler.pe_choice`,
    the choice in `state.pe_choice`); `all_pes` spreads it over all of them."""
    opts = _compile_options(graph, req)
    state, pm = _compile_whole(graph, topology, opts, progress=progress, all_pes=req.all_pes,
                               dump_after=req.dump_after,
                               dump_dir=Path(out).parent if req.dump_after else None)
    _report_layer_ops(layer_op_census(state), req.strict,
                      req.model_file or graph.metadata.get("model_name"))
    write_bundle(state, Path(out), source, cmdq=req.write_cmdq, weights=req.write_weights)
    if req.write_cmdq:
        warn_unreadable_cmdq(Path(out) / "cmdq.json")
    return state, pm


def compile_for_run(graph: Graph, source: Path | None, topology: Topology, out: Path,
                    req: CompileRequest = CompileRequest(), progress: Progress | None = None
                    ) -> tuple[CmdqProgram, PeChoice | None]:  # fmt: skip
    """compile_loaded for a timing run that keeps nothing per entry and no cmdq.json:
    (the program, the PE choice or None). The program is compiled layer by layer while it
    runs (`compiler.stream`), so host memory does not grow with layers × tiles; a program
    small enough for the cost model's PE choice is compiled whole, from the passes the
    stream already ran. Writes the bundle without cmdq.json."""
    opts = _compile_options(graph, req)
    sc = compile_streamed(structure_copy(graph), topology, opts, progress=progress)
    name = req.model_file or graph.metadata.get("model_name")
    file = str(Path(out) / "cmdq.json")
    # the limits read at call time: a test (or a probe) that changes them changes this too
    if not req.all_pes and len(topology.pes) > pe_choice.MIN_PES \
            and sc.entries <= pe_choice.MAX_ENTRIES:
        state, _ = _compile_whole(graph, topology, opts, whole=sc.finish()[0])
        _report_layer_ops(layer_op_census(state), req.strict, name)
        write_bundle(state, Path(out), source, cmdq=False, weights=req.write_weights)
        return program_of(state, file), state.pe_choice
    _report_layer_ops(sc.survey.census, req.strict, name)
    write_bundle(sc.bundle_state(), Path(out), source, cmdq=False, entries=sc.entries,
                 weights=req.write_weights)
    stream = compile_ahead.entry_stream(sc.chunks(), sc.entries, sc.survey.layer_entries,
                                        limits_for(topology), file, in_child=req.ahead,
                                        topology=topology)  # the child lowers them too
    return streamed_program(stream, asdict(cmdq_metadata(sc.state))), None


def _compile_options(graph: Graph, req: CompileRequest) -> CompileOptions:
    """What the user gave, checked (size, QConfig globs, NaN/Inf: `check_graph_inputs`),
    and the calibration inputs, as the compiler's options (once per compile)."""
    if not is_shape_only(graph):  # a shape-only model holds no values: nothing to estimate
        refuse_above_limit(graph_bytes(graph),
                           f"model {req.model_file or graph.metadata.get('model_name')}")
        check_graph_inputs(graph, req.qconfig_file, req.model_file, req.strict)
    calib = load_inputs(req.calib_inputs, graph, strict=req.strict) if req.calib_inputs else None
    if note := widened_weights_note(graph):  # fp32-stored integer weights: reported
        warn(note)
    return CompileOptions(calib_inputs=calib)


def _compile_whole(graph: Graph, topology: Topology, opts: CompileOptions, *,
                   progress: Progress | None = None, all_pes: bool = False,
                   dump_after: tuple[str, ...] = (), dump_dir: Path | None = None,
                   whole: CompileState | None = None
                   ) -> tuple[CompileState, PassManager | None]:  # fmt: skip
    """(state, pass manager) of `graph` compiled whole: for all PEs (`all_pes`,
    `dump_after`) or for the PEs the cost model picks. `whole`: the program for
    all PEs, already compiled from a copy of `graph` (no pass manager is returned then)."""
    if all_pes or dump_after:
        if whole is not None:
            return whole, None
        return compile_graph(graph, topology, opts, dump_after=dump_after, dump_dir=dump_dir,
                             progress=progress)
    pms: list[PassManager] = []

    def compile_fn(g: Graph, t: Topology) -> CompileState:
        st, p = compile_graph(g, t, opts, progress=None if pms or whole else progress)
        pms.append(p)
        return st

    opts.calibration = {}  # the candidates share one calibration run, dropped after
    try:
        state = compile_on_best_pes(graph, topology, compile_fn, whole)
    finally:
        opts.calibration = None
    return state, (pms[0] if pms and whole is None else None)


def _report_layer_ops(census: LayerOpCensus, strict: bool, name: str | None) -> None:
    """Whole-layer ops are a reported fact, never quiet: a warning line, or with `strict`
    an InputError (nothing is written)."""
    note = census.note()
    if note and strict:
        raise InputError(note + " (refused with --strict)", file=name)
    if note:  # keyed by what runs whole: serve's programs of one model rename nodes
        warn(note, key=("whole-layer ops", tuple(sorted(census.by_op))))


def warn_unreadable_cmdq(path: Path) -> None:
    """Warn when a written cmdq.json is over the size `load_program` reads (MAX_CMDQ_BYTES):
    `kernbench run` simulated it from memory, `kernbench simulate` will refuse it."""
    size = path.stat().st_size
    if size > MAX_CMDQ_BYTES:
        warn(f"{path}: {size} bytes, over the {MAX_CMDQ_BYTES}-byte limit of CMDQ files; "
             "`kernbench simulate` will refuse this bundle (`kernbench run` simulates the "
             "program from memory, see docs/adr/0708)")


@gc_paused()  # the program's models live until it is simulated (common.gc_pause)
def program_of(state: CompileState, file: str | None = None) -> CmdqProgram:
    """The compiled program of `state` as the simulator reads it, without a JSON round
    trip: the models `load_program` would make of the cmdq.json the compiler writes. The
    state gives up its program (consumed as it is parsed), tile graph and memory plan
    (released first, so a real-size program's tiles, entries and models never coexist)."""
    doc = state.cmdq
    state.cmdq = state.tiles = state.memory = None
    return parse_entries(doc.entries, doc.to_json()["metadata"], file=file)


def check_graph_inputs(graph: Graph, qconfig_file: str | None, model_file: str | None,
                       strict: bool) -> None:
    """What the user gave that is legal but almost surely a mistake: a QConfig override
    whose glob matches no layer, NaN/Inf in the weights. Warnings, errors with `strict`."""
    if qconfig_file is not None and graph.qconfig:
        for glob in unmatched_overrides(graph, parse_qconfig(graph.qconfig)):
            msg = (f"override match {glob!r} matches no layer (names tried: IR layer ids, "
                   "metadata.layer_name, ONNX node names; see docs/quantization.md)")
            if strict:
                raise InputError(msg + " (refused with --strict)", file=qconfig_file,
                                 field="overrides")
            warn(f"{qconfig_file}: {msg}")
    for key in sorted(graph.weights):
        w = np.asarray(graph.weights[key])
        # a one-element ±Inf constant is a mask's fill value (masked_fill's -inf), NaN is not
        if w.dtype.kind == "f" and not (w.size == 1 and np.isinf(w).all()):
            check_finite(w, f"weight '{key}'", model_file, strict)


def load_inputs(path: Path | None, graph: Graph, seed: int = 0, *,
                strict: bool = False) -> dict[str, np.ndarray]:
    """The model's inputs from an .npz keyed by input name (checked: check_inputs), or
    seeded random inputs valid for the model when `path` is None."""
    if path is None:
        return default_inputs(graph, seed)
    check_input_file(path, MAX_MODEL_BYTES, label=f"--inputs {path}")
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"cannot read inputs: {e}", file=str(path)) from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise InputError("a single array (.npy); --inputs wants an .npz keyed by input name "
                         f"({', '.join(graph.inputs)})", file=str(path))
    try:
        with z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"cannot read inputs: {e}", file=str(path)) from None
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise InputError(f"missing input(s) {', '.join(missing)} (the file has "
                         f"{', '.join(sorted(feeds)) or 'no arrays'})", file=str(path))
    extra = sorted(set(feeds) - set(graph.inputs))
    if extra:
        raise InputError(f"unknown input(s) {', '.join(extra)}; the model's inputs are "
                         f"{', '.join(graph.inputs)}", file=str(path))
    return check_inputs(feeds, graph, str(path), strict=strict)


def check_inputs(feeds: dict[str, np.ndarray], graph: Graph, file: str, *,
                 strict: bool = False) -> dict[str, np.ndarray]:
    """Inputs as the model declares them: shape, a safe cast to the dtype, token ids inside
    the vocabulary, finite floats (NaN/Inf warn; refused with `strict`). The cast arrays
    are what every consumer (simulator, interpreter, onnxruntime) receives."""

    out = {}
    for tid in graph.inputs:
        t = graph.tensors[tid]
        x = np.asarray(feeds[tid])
        if list(x.shape) != list(t.shape):
            raise InputError(f"shape {list(x.shape)}, the model expects {t.shape}", file=file,
                             where=f"input '{tid}'")
        want = np_dtype(t.dtype)
        if x.dtype.kind not in "biuf":
            raise InputError(f"dtype {x.dtype}, the model expects {t.dtype}", file=file,
                             where=f"input '{tid}'")
        if x.dtype != want:
            if want.kind in "iub" and x.dtype.kind == "f" and not np.all(np.mod(x, 1) == 0):
                raise InputError(f"{x.dtype} values that are not integers, the model expects "
                                 f"{t.dtype}", file=file, where=f"input '{tid}'")
            x = x.astype(want)
        if x.dtype.kind == "f":
            check_finite(x, f"input '{tid}'", file, strict)
        if want.kind in "iu":
            vocab = vocab_size(graph, tid)
            if vocab is not None and x.size and (x.min() < 0 or x.max() >= vocab):
                raise InputError(f"ids must lie in [0, {vocab}) (got {x.min()}..{x.max()})",
                                 file=file, where=f"input '{tid}'")
        out[tid] = x
    return out


def check_finite(x: np.ndarray, what: str, file: str | None, strict: bool) -> None:
    """NaN or Inf in a tensor: a warning naming it (an InputError with `strict`), and then
    numpy's float warnings off for the command (cli.main restores them): legal, mostly a
    mistake, and that one line is the diagnostic."""
    bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
    if not bad:
        return
    msg = f"{bad} NaN/Inf value(s) of {np.size(x)}"
    if strict:
        raise InputError(msg + " (refused with --strict)", file=file, where=what)
    warn(f"{file + ': ' if file else ''}{what}: {msg}")
    np.seterr(invalid="ignore", over="ignore", divide="ignore")


@dataclass(frozen=True)
class SimOptions:
    """What a simulation of a bundle is asked for (`simulate_bundle`)."""

    verify: bool = False            # data pass + verification (bundles with weights)
    inputs: Path | None = None      # inputs .npz (default: seeded random inputs)
    dump_intermediates: bool = False
    trace: bool = True              # write trace.json
    report: bool = True             # write report.html
    strict: bool = False            # NaN/Inf inputs are errors
    save_oplog: Path | None = None  # with `verify`: the op log for `replay`
    entries: bool = False           # per-entry detail whatever the program's size
    check_prog: bool = True         # False: an in-memory `prog` is not validated again


#: a program of at most this many CMDQ entries keeps its per-entry detail with the report
#: (the timeline, the critical path, the cost-model estimate, stats.json's entry rows);
#: a larger one is reported from the streamed run unless `entries` or `trace` asks
MAX_DETAIL_ENTRIES = 10_000

#: a timing-only run: no trace, no report (stats.json without entry rows)
TIMING_ONLY = SimOptions(trace=False, report=False)

#: `post_stats(stats, spans, actions_of)` → the stats to write (replay, LLM figures)
PostStats = Callable[[Stats, dict[str, LayerSpan], ActionsOf], Stats]


@dataclass(frozen=True)
class SimHooks:
    """How a simulation talks to its caller: `phase` per long phase (progress), `watch`
    observes the timing run, `post_stats` amends the stats before they are written."""

    phase: PhaseHook | None = None
    watch: WatchHook | None = None
    post_stats: PostStats | None = None


@gc_paused()  # the program's models and the run's records live until it is written
def simulate_bundle(program: Path, topology: Topology, out: Path,
                    opts: SimOptions = SimOptions(), hooks: SimHooks = SimHooks(),
                    prog: CmdqProgram | None = None) -> SimResult:
    """Simulate a cmdq.json or a bundle (data pass and verification on request); write
    stats.json, summary.txt, layers.csv (with layers), report.html (`report`), trace.json
    (`trace`), outputs.npz and verification.json (`verify`) into `out`. `post_stats(stats, spans, actions_of)`
    amends the stats before they are written (`actions_of(layer ids)`: action counts).
    Per-entry records (entry rows, critical path, estimate, the report's timeline) with
    `trace`, `verify`, `entries`, or the report of a program of at most
    MAX_DETAIL_ENTRIES entries; otherwise `entry_count` (docs/stats.md).
    `prog`: the program in memory (`program_of`; cmdq.json unread; see `check_prog`)."""
    verify, trace, report = opts.verify, opts.trace, opts.report
    phase, watch, post_stats = hooks.phase, hooks.watch, hooks.post_stats
    program = Path(program)
    bundle_dir = program if program.is_dir() else program.parent
    cmdq_path = program / "cmdq.json" if program.is_dir() else program
    if prog is None:
        check_input_file(cmdq_path, MAX_JSON_BYTES)  # never block on a FIFO, /dev/zero
        prog, opts = load_program(cmdq_path), replace(opts, check_prog=True)  # a file's is
    # the report's timeline needs the trace (the file may not be written); per-entry
    # detail costs host time and memory that grow with the commands
    record = trace or opts.entries or (report and len(prog.cmdq) <= MAX_DETAIL_ENTRIES)
    verdict, outputs = None, None
    if verify:
        run, outputs, verdict = _run_verified(bundle_dir, prog, topology, opts, record, phase)
    elif opts.save_oplog is not None:
        raise InputError("--save-oplog saves the data pass: it needs --verify",
                         field="--save-oplog")
    else:
        # without a trace or the report nothing needs per-entry records: the program is
        # streamed and summarized per layer (host memory does not grow with commands)
        run = simulate_program(prog, topology, file=str(cmdq_path), trace=record, phase=phase,
                               watch=watch, per_entry=record, consume=True, check=opts.check_prog)
        del prog
    stats = run.stats()
    spans = run.layer_spans(stats)
    add_roofline(stats, bundle_dir / "roofline.json", spans)
    add_precision(stats, bundle_dir / "ir.json")
    if record or verify:  # a streamed run has given its entries up (no estimate then)
        add_estimate(stats, run.entries, topology, spans)
    if "layers" in stats:
        layers = stats["layers"]
        set_layer_figures(stats, run.layer_energy({k: v["ns"] for k, v in layers.items()}),
                          run.layer_traffic(list(layers)))
    add_token_energy(stats, bundle_dir)
    if post_stats is not None:
        stats = post_stats(stats, spans, run.layer_actions)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "stats.json"]
    write_json(stats, out / "stats.json")
    trace_obj = run.trace(stats) if record else None
    if trace:
        write_json(trace_obj, out / "trace.json")
        written.append(out / "trace.json")
    if outputs is not None:
        tmp = out / "outputs.npz.tmp"
        save_weights(outputs, tmp)  # deterministic npz (fixed zip timestamps)
        tmp.replace(out / "outputs.npz")
        write_json(verdict.to_json(), out / "verification.json")
        written += [out / "outputs.npz", out / "verification.json"]
    (out / "summary.txt").write_text(
        summary_text(stats, verdict.lines() if verdict is not None else None),
        encoding="utf-8")
    written.append(out / "summary.txt")
    written += write_layers_csv(stats, out / "layers.csv")
    if report:
        written.append(write_report(out, stats, trace_obj,
                                    verdict.to_json() if verdict is not None else None, topology))
    return SimResult(stats, verdict, outputs, written)


def _run_verified(bundle_dir: Path, prog: CmdqProgram, topology: Topology, opts: SimOptions,
                  record: bool, phase: PhaseHook | None
                  ) -> tuple[CmdqRun, dict[str, np.ndarray], Verdict]:  # fmt: skip
    """Timing pass + data pass of a bundle, then the verdict (interpreter, onnxruntime)."""
    bundle = Bundle.load(bundle_dir)
    if is_shape_only(bundle.graph):
        raise InputError("--verify needs weight values; this bundle is of a shape-only "
                         "model (timing only)", file=str(bundle_dir))
    problems = check_bundle(bundle_dir, topology, max_errors=1, cmdq=False, ir=bundle.graph)
    if problems:  # a tampered bundle: refused before anything is deployed
        raise problems[0]
    feeds = load_inputs(opts.inputs, bundle.graph, strict=opts.strict)
    watch = Intermediates(bundle) if opts.dump_intermediates else None
    run, outputs, store = run_with_data(bundle, prog, topology, feeds, trace=record,
                                        phase=phase, save_oplog=opts.save_oplog,
                                        watch_ops=watch)
    source = bundle_dir / "model.onnx"
    verdict = verify_outputs(bundle, outputs, feeds, store, source if source.exists() else None,
                             intermediates=watch.capture if watch is not None else None)
    return run, outputs, verdict


def add_roofline(stats: dict[str, Any], roof: Path, spans: dict[str, LayerSpan]) -> None:
    """Per-layer roofline bounds (a bundle's roofline.json, if any) and the simulated
    layer `spans` into `stats`."""
    if roof.exists():
        try:
            bounds = json.loads(read_input_text(roof, MAX_JSON_BYTES))
        except ValueError as e:
            raise InputError(f"unreadable: {e}", file=str(roof)) from None
        set_layers(stats, layer_report(bounds, spans))


def add_estimate(stats: dict[str, Any], entries: list[Any], topology: Topology,
                 spans: dict[str, LayerSpan] | None = None) -> None:
    """The cost model's estimate (compiler.cost) beside the simulated times: the
    end-to-end `estimate_ns`, and per layer `estimate_ns` (of `ns`), `estimate_busy_ns`
    (of `busy_ns`) and `estimate_by` (the resource or "path" that sets its own cost);
    each of `spans` gets its layer's estimated end."""
    est = estimate_program(entries, topology)
    for lid, sp in (spans or {}).items():
        if lid in est.layers:
            sp.estimate_end_ns = est.layers[lid].end_ns
    set_estimate(stats, est.estimate_ns, {
        lid: LayerEstimateFigures(le.estimate_ns, le.busy_ns, le.bound_by)
        for lid, le in est.layers.items()})


def add_token_energy(stats: dict[str, Any], bundle_dir: Path) -> None:
    """For a language model (a bundle whose memory.json has an `input_ids` input): the tokens
    one run processes (prefill: batch × sequence; a decode step: the generated tokens) and
    the energy per token, into stats["energy"]."""
    mem = bundle_dir / "memory.json"
    if not mem.exists() or "energy" not in stats:
        return
    try:
        ids = json.loads(read_input_text(mem, MAX_JSON_BYTES)).get("tensors", {}).get("input_ids")
    except ValueError as e:
        raise InputError(f"unreadable: {e}", file=str(mem)) from None
    if not isinstance(ids, dict) or not ids.get("shape"):
        return
    set_token_energy(stats, int(np.prod(ids["shape"])))
