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
    "--seq-len", help="named model (gpt2, llama, gpt2-small): new tokens "
                      "[default: 16 prefill, 1 decode]")]
KvLenOpt = Annotated[int | None, typer.Option(
    "--kv-len", help="named model: KV-cache length; > 0 builds a decode step [default: 0]")]


def _named_model(model: Path, seq_len: int | None, kv_len: int | None, save_dir: Path) -> Path:
    """MODEL is a file, or a built-in name (kernbench.models.builders.MODELS) built with
    the given shapes and saved into save_dir."""
    from kernbench.errors import InputError
    from kernbench.models.builders import MODELS, model_for

    if model.exists() or str(model) not in MODELS:
        if seq_len is not None or kv_len is not None:
            raise InputError("--seq-len/--kv-len apply to the named models "
                             f"({', '.join(MODELS)}); a model file's shapes are fixed",
                             file=str(model))
        return model
    import onnx

    kv = kv_len or 0
    seq = seq_len if seq_len is not None else (1 if kv > 0 else 16)
    m = model_for(str(model), seq_len=seq, kv_len=kv)
    save_dir.mkdir(parents=True, exist_ok=True)
    path = save_dir / f"{model}_seq{seq}_kv{kv}.onnx"
    onnx.save(m, str(path))
    err.print(f"built {model} ({'decode' if kv else 'prefill'}: seq {seq}, kv {kv})")
    return path


def _progress():  # noqa: ANN202
    from rich.progress import Progress, SpinnerColumn, TextColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err,
                    transient=True)


@app.command("compile")
def compile_cmd(
    model: Annotated[Path, typer.Argument(help="MODEL.onnx, ir.json or gpt2 | llama | gpt2-small")],
    out: Annotated[Path, typer.Option("--out", "-o", help="bundle folder to write")],
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    qconfig: QconfigOpt = None,
    dump_after: DumpOpt = None,
    calib_inputs: Annotated[Path | None, typer.Option(
        "--calib-inputs", help="inputs .npz to calibrate activation scales on")] = None,
    seq_len: SeqLenOpt = None,
    kv_len: KvLenOpt = None,
    time_passes: Annotated[bool, typer.Option(
        "--time-passes", help="print each pass's time (and its checks') on stderr")] = False,
) -> None:
    """Compile a model into a bundle: cmdq.json, memory.json, weights.npz, ir.json, ...

    MODEL may also be gpt2, llama or gpt2-small, built for --seq-len / --kv-len."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # a built model is copied into the bundle
        _compile(_named_model(model, seq_len, kv_len, Path(tmp)), out, topology, set_, qconfig,
                 dump_after, calib_inputs, time_passes)


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
    model: Annotated[Path, typer.Argument(help="MODEL.onnx, ir.json or gpt2 | llama | gpt2-small")],
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
    save_oplog: SaveOplogOpt = None,
) -> None:
    """Compile, simulate and report (and verify with --verify).

    MODEL may also be gpt2, llama or gpt2-small, built for --seq-len / --kv-len."""
    from kernbench.topology import load_topology

    model = _named_model(model, seq_len, kv_len, Path(out))

    topo = load_topology(topology, set_ or [])
    bundle = Path(out) / "bundle"
    from kernbench.host.flow import compile_model

    with _progress() as prog:
        task = prog.add_task("compiling")
        state, _ = compile_model(model, topo, bundle, qconfig=qconfig, calib_inputs=inputs,
                                 progress=lambda name: prog.update(task,
                                                                   description=f"pass {name}"))
    err.print(f"compiled {model}: {len(state.cmdq.entries)} CMDQ entries")
    simulate_and_report(bundle, topo, Path(out), verify, inputs, dump_intermediates, not no_trace,
                        not no_report, save_oplog=save_oplog)


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
