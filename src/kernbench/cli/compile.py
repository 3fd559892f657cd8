"""`kernbench compile` and `kernbench run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import (
    EntriesOpt,
    JsonOpt,
    QuietOpt,
    SaveOplogOpt,
    SetOpt,
    TopologyOpt,
    TraceOpt,
    err,
    print_result,
    set_quiet,
)
from kernbench.cli.progress import Phases
from kernbench.errors import InputError

QconfigOpt = Annotated[Path | None, typer.Option("--qconfig", "-q",
                                                 help="quantization config YAML")]
DumpOpt = Annotated[list[str] | None, typer.Option(
    "--dump-after", help="write the state after this pass (repeatable; e.g. tiling)")]
SeqLenOpt = Annotated[int | None, typer.Option(
    "--seq-len", help="new tokens (built-in names, config.json, ONNX with a symbolic "
                      "sequence dim) [default: 16 prefill, 1 decode]")]
AllPesOpt = Annotated[bool, typer.Option(
    "--all-pes", help="spread the model over every PE (default: a small model may use fewer, "
                      "as the cost model estimates faster; docs/compiler.md)")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="turn warnings into errors: a QConfig glob matching no layer, "
                     "NaN/Inf in weights or inputs, layers the compiler runs whole "
                     "(as one layer op on one PE)")]
KvLenOpt = Annotated[int | None, typer.Option(
    "--kv-len", help="KV-cache length; > 0 builds a decode step [default: 0]")]
BatchOpt = Annotated[int | None, typer.Option(
    "--batch", help="sequences per step (built-in names, config.json, ONNX with a symbolic "
                    "batch dim) [default: 1]")]
RoutingOpt = Annotated[str | None, typer.Option(
    "--routing", help="MoE config.json models: the router's expert choice, uniform | zipf | "
                      "zipf:SKEW (0 < SKEW <= 4) [default: uniform]; docs/models.md")]
RoutingSeedOpt = Annotated[int | None, typer.Option(
    "--routing-seed", help="seed of --routing's draw [default: 0]")]
ExactStepsOpt = Annotated[bool, typer.Option(
    "--exact-steps", help="with --generate: simulate every decode step (default: the "
                          "serving step memo's buckets, docs/serving.md)")]
TpOpt = Annotated[int | None, typer.Option(
    "--tp", help="tensor parallelism: heads and MLP columns split over N chips of a "
                 "multi-chip topology, all-reduced between them (docs/multichip.md)")]
DpOpt = Annotated[int | None, typer.Option(
    "--dp", help="data parallelism: N replicas (each on --tp chips), the --batch split "
                 "between them (docs/multichip.md)")]
PpOpt = Annotated[int | None, typer.Option(
    "--pp", help="pipeline parallelism: the decoder layers split into N stages on N chips "
                 "(times --tp), activations sent between them (docs/multichip.md)")]
MicroBatchesOpt = Annotated[int | None, typer.Option(
    "--micro-batches", help="with --pp: the batch split into M micro-batches the stages "
                            "overlap [default: prefill the largest divisor of the batch "
                            "<= --pp, decode 1]")]
EpOpt = Annotated[int | None, typer.Option(
    "--ep", help="expert parallelism: an MoE model's experts split over N chips, tokens "
                 "sent to their experts' chips and back by all-to-all (docs/multichip.md)")]
RoutingSameOpt = Annotated[bool, typer.Option(
    "--routing-same-layers", help="every MoE layer takes the first layer's draw (identical "
                                  "blocks: replayed, much faster to simulate)")]
ExactOpt = Annotated[bool, typer.Option(
    "--exact", help="simulate every layer (no replay of identical blocks)")]
ReplayBlocksOpt = Annotated[int, typer.Option(
    "--replay-blocks", help="identical blocks to simulate before replaying the rest (at "
                            "least 3; above 4 the replay check may leave out a warm-up)")]
LlmOpt = Annotated[bool, typer.Option(
    "--llm", help="LLM figures (TTFT / TPOT, tokens/s, KV bytes, HBM fit) for any model "
                  "with attention; config.json models always get them")]
GenerateOpt = Annotated[int | None, typer.Option(
    "--generate", help="then N new tokens: the prompt's prefill gives the first, N − 1 "
                       "decode steps with a growing KV cache the rest (TTFT, TPOT per "
                       "step, tokens/s, energy per token)")]
NoCompileAheadOpt = Annotated[bool, typer.Option(
    "--no-compile-ahead", help="compile in this process only (default: a program compiled "
                               "layer by layer as it runs is compiled in a second process, "
                               "where two CPUs and fork exist; the same results)")]
MODEL_HELP = ("MODEL.onnx, ir.json, a Hugging Face config.json (or its folder), or "
              "gpt2 | llama | gpt2-small")


def _named_model(model: Path, seq_len: int | None, kv_len: int | None, save_dir: Path,
                 batch: int | None = None, qconfig: Path | None = None,
                 verify: bool = False, routing: str | None = None,
                 routing_seed: int | None = None, routing_same: bool = False
                 ):  # noqa: ANN202
    """MODEL resolved by kernbench.host.models.resolve_model (built-in names and config.json
    files are built with the given shapes into save_dir; ONNX dims are bound)."""
    from kernbench.host.models import ShapeOptions, resolve_model

    res = resolve_model(model, ShapeOptions(batch, seq_len, kv_len, routing, routing_seed,
                                            routing_same),
                        Path(save_dir), qconfig, need_values=verify)
    for line in res.notes:
        err.print(line)
    return res


@app.command("compile")
def compile_cmd(
    model: Annotated[Path, typer.Argument(help=MODEL_HELP)],
    out: Annotated[Path, typer.Option("--out", "-o", help="bundle folder to write")],
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    qconfig: QconfigOpt = None,
    dump_after: DumpOpt = None,
    calib_inputs: Annotated[Path | None, typer.Option(
        "--calib-inputs", help="inputs .npz to calibrate activation scales on")] = None,
    seq_len: SeqLenOpt = None,
    kv_len: KvLenOpt = None,
    routing: RoutingOpt = None,
    routing_seed: RoutingSeedOpt = None,
    routing_same: RoutingSameOpt = False,
    strict: StrictOpt = False,
    quiet: QuietOpt = False,
    batch: BatchOpt = None,
    time_passes: Annotated[bool, typer.Option(
        "--time-passes", help="print each pass's time (and its checks') on stderr")] = False,
    all_pes: AllPesOpt = False,
) -> None:
    """Compile a model into a bundle: cmdq.json, memory.json, weights.npz, ir.json, ...

    MODEL may also be gpt2, llama or gpt2-small, or a Hugging Face config.json (a
    shape-only model), built for --batch / --seq-len / --kv-len."""
    import tempfile

    from kernbench.cli.outdir import OutDir

    set_quiet(quiet)
    phases = Phases(err, enabled=not quiet)
    with OutDir(out) as stage, tempfile.TemporaryDirectory() as tmp:
        res = _named_model(model, seq_len, kv_len, Path(tmp), batch, qconfig,
                           routing=routing, routing_seed=routing_seed,
                           routing_same=routing_same)
        _compile(res.path, stage, topology, set_, qconfig, dump_after, calib_inputs, phases,
                 strict, time_passes, all_pes, str(model))
    err.print(f"wrote the bundle {out}")


def _compile(model: Path, out: Path, topology: str, set_: list[str] | None,
             qconfig: Path | None, dump_after: list[str] | None,
             calib_inputs: Path | None, phases: Phases, strict: bool,
             time_passes: bool = False, all_pes: bool = False,
             source: str | None = None) -> None:
    from kernbench.host.flow import CompileRequest, compile_model
    from kernbench.topology import load_topology

    topo = load_topology(topology, set_ or [])
    with phases.phase("compile"):
        state, pm = compile_model(model, topo, out, CompileRequest(
            qconfig=qconfig, dump_after=tuple(dump_after or ()), calib_inputs=calib_inputs,
            strict=strict, all_pes=all_pes, model_file=source), phases.update)
    err.print(f"compiled {model} for '{topo.name}': {len(state.cmdq.entries)} CMDQ entries")
    if state.pe_choice is not None and state.pe_choice.pes < state.pe_choice.of:
        err.print(state.pe_choice.note())
    if time_passes:
        for line in pm.timing_lines():
            err.print(line)


@app.command("run")
def run_cmd(
    model: Annotated[Path, typer.Argument(help=MODEL_HELP)],
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    qconfig: QconfigOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    verify: Annotated[bool, typer.Option("--verify", help="run the data pass and check")] = False,
    inputs: Annotated[Path | None, typer.Option("--inputs", help="inputs .npz")] = None,
    dump_intermediates: Annotated[bool, typer.Option(
        "--dump-intermediates", help="compare every layer's output")] = False,
    trace: TraceOpt = False,
    keep_bundle: Annotated[bool, typer.Option(
        "--keep-bundle", help="also write the compiled bundle to OUT/bundle (large: weights, "
                              "the model)")] = False,
    seq_len: SeqLenOpt = None,
    kv_len: KvLenOpt = None,
    routing: RoutingOpt = None,
    routing_seed: RoutingSeedOpt = None,
    routing_same: RoutingSameOpt = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip report.html")] = False,
    strict: StrictOpt = False,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
    batch: BatchOpt = None,
    exact: ExactOpt = False,
    replay_blocks: ReplayBlocksOpt = 4,
    llm: LlmOpt = False,
    save_oplog: SaveOplogOpt = None,
    all_pes: AllPesOpt = False,
    generate: GenerateOpt = None,
    exact_steps: ExactStepsOpt = False,
    entries: EntriesOpt = False,
    tp: TpOpt = None,
    dp: DpOpt = None,
    ep: EpOpt = None,
    pp: PpOpt = None,
    micro_batches: MicroBatchesOpt = None,
    no_compile_ahead: NoCompileAheadOpt = False,
) -> None:
    """Compile, simulate and report (and verify with --verify).

    MODEL may also be gpt2, llama or gpt2-small, or a Hugging Face config.json (a
    shape-only model: timing only), built for --batch / --seq-len / --kv-len. Writes
    stats.json, summary.txt, report.html (+ trace.json with --trace, outputs.npz and
    verification.json with --verify, bundle/ with --keep-bundle) into --out."""
    import tempfile

    from kernbench.cli.outdir import OutDir
    from kernbench.host import compile_ahead
    from kernbench.host.run import RunOptions
    from kernbench.topology import load_topology

    set_quiet(quiet)
    phases = Phases(err, enabled=not quiet)
    topo = load_topology(topology, set_ or [])
    par, pipe = _parallelism(tp, dp, ep, pp, micro_batches, generate, batch, kv_len, model)
    with OutDir(out) as stage, tempfile.TemporaryDirectory() as tmp:
        amend = None
        if generate is not None:
            if routing or routing_seed is not None or routing_same:  # steps build their own
                raise InputError("--routing/--routing-seed are not passed to the decode "
                                 "steps of --generate", field="--generate")
            amend = _generation(generate, model, kv_len, verify, qconfig, Path(tmp),
                                (topo, stage, batch, seq_len, exact_steps))
        res = _named_model(model, seq_len, kv_len, Path(tmp), pipe.batch, qconfig, verify,
                           routing, routing_seed, routing_same)
        opts = RunOptions(qconfig=qconfig, verify=verify, inputs=inputs,
                          dump_intermediates=dump_intermediates, trace=trace,
                          report=not no_report, exact=exact, save_oplog=save_oplog,
                          llm=llm or generate is not None, strict=strict, all_pes=all_pes,
                          write_cmdq=keep_bundle, write_weights=keep_bundle, entries=entries,
                          bundle=(stage if keep_bundle else Path(tmp)) / "bundle",
                          tp=par.tp, dp=par.dp, ep=par.ep,
                          replay_blocks=_replay_blocks(replay_blocks),
                          compile_ahead=not no_compile_ahead and compile_ahead.available(),
                          source=str(model), **pipe.run_fields())
        ok = _run_and_report(res.path, topo, stage, opts, phases, json_, quiet, amend)
    err.print(f"wrote {out}/")
    if not ok:
        raise typer.Exit(1)


def _replay_blocks(n: int) -> int:
    """`--replay-blocks`, checked (`block_replay.simulated_blocks`)."""
    from kernbench.host.block_replay import simulated_blocks

    return simulated_blocks(n)


def _generation(generate: int, model: Path, kv_len: int | None, verify: bool,
                qconfig: Path | None, tmp: Path, run: tuple):  # noqa: ANN202
    """The `amend(result)` of `--generate` (its decode steps' summary lines); `run` is
    (topology, out dir, batch, seq_len, exact_steps)."""
    from kernbench.cli.generate import add_generation, check_generate

    served = check_generate(generate, model, kv_len, verify, qconfig, tmp)
    topo, stage, batch, seq_len, exact_steps = run

    def amend(r) -> list[str]:  # noqa: ANN001
        return add_generation(r, served, topo, stage, generate, batch, seq_len, exact_steps)
    return amend


def _parallel(tp: int | None, dp: int | None, generate: int | None,
              batch: int | None, ep: int | None = None,
              model: Path | None = None):  # noqa: ANN202
    """--tp / --dp / --ep checked (host.parallel.Parallel: the batch each replica or
    expert-parallel rank runs)."""
    from kernbench.host.parallel import check_parallel

    if (tp is not None or dp is not None or ep is not None) and generate is not None:
        raise InputError("--generate with --tp, --dp or --ep is not built yet "
                         "(docs/multichip.md)", field="--tp" if tp is not None else
                         "--dp" if dp is not None else "--ep")
    if ep is not None:
        from kernbench.host.ep import check_ep_options

        return check_ep_options(ep, tp, dp, batch, model)
    return check_parallel(tp, dp, batch)


def _parallelism(tp: int | None, dp: int | None, ep: int | None, pp: int | None,
                 micro_batches: int | None, generate: int | None, batch: int | None,
                 kv_len: int | None, model: Path):  # noqa: ANN202
    """(--tp / --dp / --ep checked: `_parallel`, --pp / --micro-batches checked:
    host.pipeline.Pipeline, whose `batch` is what a micro-batch runs)."""
    from kernbench.host.pipeline import check_pipeline

    par = _parallel(tp, dp, generate, batch, ep, model)
    if (pp is not None or micro_batches is not None) and (generate is not None or par.ep != 1):
        flag = "--generate" if generate is not None else "--ep"
        raise InputError(f"{flag} with --pp is not built yet (docs/multichip.md)",
                         field="--pp")
    return par, check_pipeline(pp, micro_batches, par.batch, decode=bool(kv_len))


def _run_and_report(model: Path, topo, out: Path, opts, phases: Phases,  # noqa: ANN001
                    as_json: bool, quiet: bool, amend=None) -> bool:  # noqa: ANN001
    """Run, then `amend(result)` (→ extra summary lines: a generation's), then report."""
    from kernbench.cli.sim_progress import simulation_watch
    from kernbench.host.run import RunHooks, run_model

    hooks = RunHooks(note=err.print, watch=None if quiet else simulation_watch(err),
                     compile_progress=phases.update, phase=phases.phase)
    if opts.pp != 1:
        from kernbench.host.pipeline import run_pipeline

        res = run_pipeline(model, topo, out, opts, hooks)
    elif opts.ep != 1:
        from kernbench.host.ep import run_ep

        res = run_ep(model, topo, out, opts, hooks)
    elif opts.tp != 1 or opts.dp != 1:
        from kernbench.host.parallel import run_parallel

        res = run_parallel(model, topo, out, opts, hooks)
    else:
        res = run_model(model, topo, out, opts, hooks)
    n = res.stats.get("entry_count", len(res.stats.get("entries", {})))
    err.print(f"compiled {model.name}: {n} CMDQ entries simulated")
    if "replay" in res.stats:
        r = res.stats["replay"]
        err.print(f"replay: the tables below cover the {r['simulated_blocks']} simulated "
                  f"blocks of {r['blocks']}")
    extra = amend(res) if amend is not None else []
    ok = report_result(res, as_json)
    if extra and not as_json:
        print("\n" + "\n".join(extra), flush=True)
    return ok


def report_result(res, as_json: bool) -> bool:  # noqa: ANN001
    """Tables on stderr, the summary (or stats.json with `as_json`) on stdout; False when
    the verification failed (the caller exits 1 after the files are in place)."""
    from kernbench.host.verify import print_verdict
    from kernbench.report.result_text import stdout_text
    from kernbench.report.summary import print_layers, print_summary

    print_summary(res.stats, err)
    if "layers" in res.stats:
        print_layers(res.stats, err)
    if res.verdict is not None:
        print_verdict(res.verdict, err)
    print_result(res.stats, stdout_text(
        res.stats, res.verdict.lines() if res.verdict is not None else None), as_json)
    return res.verdict is None or res.verdict.ok


def simulate_and_report(bundle: Path, topo, out: Path, verify: bool, inputs: Path | None,  # noqa: ANN001
                        dump_intermediates: bool, trace: bool, report: bool = True, *,
                        phases: Phases | None = None, as_json: bool = False,
                        strict: bool = False, save_oplog: Path | None = None,
                        entries: bool = False) -> bool:
    """Simulate (and verify), write the results into `out`, print the summary on stdout
    (stats.json with `as_json`) and the tables on stderr. Returns False when the
    verification failed (the caller exits 1 after the files are in place)."""
    from kernbench.host.flow import SimHooks, SimOptions, simulate_bundle

    res = simulate_bundle(bundle, topo, out, SimOptions(
        verify=verify, inputs=inputs, dump_intermediates=dump_intermediates, trace=trace,
        report=report, strict=strict, save_oplog=save_oplog, entries=entries),
        SimHooks(phase=phases.phase if phases else None))
    return report_result(res, as_json)
