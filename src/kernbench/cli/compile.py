"""`kernbench compile` and `kernbench run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SaveOplogOpt, SetOpt, TopologyOpt, err

QconfigOpt = Annotated[Path | None, typer.Option("--qconfig", "-q",
                                                 help="quantization config YAML")]
DumpOpt = Annotated[list[str] | None, typer.Option(
    "--dump-after", help="write the state after this pass (repeatable; e.g. tiling)")]
SeqLenOpt = Annotated[int | None, typer.Option(
    "--seq-len", help="new tokens (built-in names, config.json, ONNX with a symbolic "
                      "sequence dim) [default: 16 prefill, 1 decode]")]
KvLenOpt = Annotated[int | None, typer.Option(
    "--kv-len", help="KV-cache length; > 0 builds a decode step [default: 0]")]
BatchOpt = Annotated[int | None, typer.Option(
    "--batch", help="sequences per step (built-in names, config.json, ONNX with a symbolic "
                    "batch dim) [default: 1]")]
MODEL_HELP = ("MODEL.onnx, ir.json, a Hugging Face config.json (or its folder), or "
              "gpt2 | llama | gpt2-small")


def _named_model(model: Path, seq_len: int | None, kv_len: int | None, save_dir: Path,
                 batch: int | None = None, qconfig: Path | None = None,
                 verify: bool = False):  # noqa: ANN202
    """MODEL resolved by kernbench.host.models.resolve_model (built-in names and config.json
    files are built with the given shapes into save_dir; ONNX dims are bound)."""
    from kernbench.host.models import ShapeOptions, resolve_model

    res = resolve_model(model, ShapeOptions(batch, seq_len, kv_len), Path(save_dir), qconfig,
                        need_values=verify)
    for line in res.notes:
        err.print(line)
    return res


def _progress():  # noqa: ANN202
    from rich.progress import Progress, SpinnerColumn, TextColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err,
                    transient=True)


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
    batch: BatchOpt = None,
    time_passes: Annotated[bool, typer.Option(
        "--time-passes", help="print each pass's time (and its checks') on stderr")] = False,
) -> None:
    """Compile a model into a bundle: cmdq.json, memory.json, weights.npz, ir.json, ...

    MODEL may also be gpt2, llama or gpt2-small, or a Hugging Face config.json (a
    shape-only model), built for --batch / --seq-len / --kv-len."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # a built model is copied into the bundle
        res = _named_model(model, seq_len, kv_len, Path(tmp), batch, qconfig)
        _compile(res.path, out, topology, set_, qconfig, dump_after, calib_inputs, time_passes)


def _compile(model: Path, out: Path, topology: str, set_: list[str] | None,
             qconfig: Path | None, dump_after: list[str] | None,
             calib_inputs: Path | None, time_passes: bool) -> None:
    from kernbench.host.flow import compile_model
    from kernbench.topology import load_topology

    topo = load_topology(topology, set_ or [])
    with _progress() as prog:
        task = prog.add_task("compiling")
        state, pm = compile_model(model, topo, out, qconfig=qconfig,
                                  dump_after=tuple(dump_after or ()), calib_inputs=calib_inputs,
                                  progress=lambda name: prog.update(task,
                                                                    description=f"pass {name}"))
    err.print(f"compiled {model} for '{topo.name}': {len(state.cmdq.entries)} CMDQ entries → "
              f"{out}")
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
    no_trace: Annotated[bool, typer.Option("--no-trace", help="skip trace.json")] = False,
    seq_len: SeqLenOpt = None,
    kv_len: KvLenOpt = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip report.html")] = False,
    batch: BatchOpt = None,
    exact: Annotated[bool, typer.Option(
        "--exact", help="simulate every layer (no replay of identical blocks)")] = False,
    llm: Annotated[bool, typer.Option(
        "--llm", help="LLM figures (TTFT / TPOT, tokens/s, KV bytes, HBM fit) for any model "
                      "with attention; config.json models always get them")] = False,
    save_oplog: SaveOplogOpt = None,
) -> None:
    """Compile, simulate and report (and verify with --verify).

    MODEL may also be gpt2, llama or gpt2-small, or a Hugging Face config.json (a
    shape-only model: timing only), built for --batch / --seq-len / --kv-len."""
    from kernbench.host.run import RunOptions
    from kernbench.topology import load_topology

    res = _named_model(model, seq_len, kv_len, Path(out), batch, qconfig, verify)
    topo = load_topology(topology, set_ or [])
    opts = RunOptions(qconfig=qconfig, verify=verify, inputs=inputs,
                      dump_intermediates=dump_intermediates, trace=not no_trace,
                      report=not no_report, exact=exact, llm=llm, save_oplog=save_oplog)
    _run_and_report(res.path, topo, Path(out), opts)


def _run_and_report(model: Path, topo, out: Path, opts) -> None:  # noqa: ANN001
    from kernbench.cli.progress import simulation_watch
    from kernbench.host.run import RunHooks, run_model
    from kernbench.host.verify import print_verdict
    from kernbench.report.llm import llm_lines
    from kernbench.report.summary import print_layers, print_summary

    with _progress() as prog:
        task = prog.add_task("compiling")
        hooks = RunHooks(note=err.print, watch=simulation_watch(err),
                         compile_progress=lambda name: prog.update(
                             task, description=f"pass {name}" if name else "simulating"))
        res = run_model(model, topo, out, opts, hooks)
    err.print(f"compiled {model}: {len(res.stats['entries'])} CMDQ entries simulated")
    print_summary(res.stats, err)
    if "layers" in res.stats:
        print_layers(res.stats, err)
    if "llm" in res.stats:  # results on stdout
        print("\n".join(llm_lines(res.stats["llm"])))
    if "replay" in res.stats:
        r = res.stats["replay"]
        err.print(f"replay: {r['simulated_blocks']} of {r['blocks']} blocks simulated, block "
                  f"period {r['block_period_ns']:,.1f} ns (simulated periods "
                  + ", ".join(f"{p:,.0f}" for p in r["periods_ns"])
                  + " ns); tables above cover the simulated blocks")
    err.print("wrote " + ", ".join(str(p) for p in res.written))
    if res.verdict is not None:
        print_verdict(res.verdict, err)
        if not res.verdict.ok:
            raise typer.Exit(1)


def simulate_and_report(bundle: Path, topo, out: Path, verify: bool, inputs: Path | None,  # noqa: ANN001
                        dump_intermediates: bool, trace: bool, report: bool = True,
                        save_oplog: Path | None = None) -> None:
    from kernbench.host.flow import simulate_bundle
    from kernbench.host.verify import print_verdict
    from kernbench.report.summary import print_layers, print_summary

    with _progress() as prog:
        prog.add_task("simulating" + (" + data pass" if verify else ""))
        res = simulate_bundle(bundle, topo, out, verify=verify, inputs=inputs,
                              dump_intermediates=dump_intermediates, trace=trace, report=report,
                              save_oplog=save_oplog)
    print_summary(res.stats, err)
    if "layers" in res.stats:
        print_layers(res.stats, err)
    err.print("wrote " + ", ".join(str(p) for p in res.written))
    if res.verdict is not None:
        print_verdict(res.verdict, err)
        if not res.verdict.ok:
            raise typer.Exit(1)
