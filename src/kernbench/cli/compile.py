"""`kernbench compile` and `kernbench run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import (
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

QconfigOpt = Annotated[Path | None, typer.Option("--qconfig", "-q",
                                                 help="quantization config YAML")]
DumpOpt = Annotated[list[str] | None, typer.Option(
    "--dump-after", help="write the state after this pass (repeatable; e.g. tiling)")]
SeqLenOpt = Annotated[int | None, typer.Option(
    "--seq-len", help="named model (gpt2, llama, gpt2-small): new tokens "
                      "[default: 16 prefill, 1 decode]")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="turn warnings about the inputs (a QConfig glob matching no layer, "
                     "NaN/Inf in weights or inputs) into errors")]
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

    from kernbench.host.estimate import named_model_bytes, refuse_above_limit

    kv = kv_len or 0
    seq = seq_len if seq_len is not None else (1 if kv > 0 else 16)
    if seq >= 1 and kv >= 0:  # (bad values are refused by the builder, by name)
        refuse_above_limit(named_model_bytes(MODELS[str(model)], seq, kv),
                           f"{model} --seq-len {seq} --kv-len {kv}")
    m = model_for(str(model), seq_len=seq, kv_len=kv)
    save_dir.mkdir(parents=True, exist_ok=True)
    path = save_dir / f"{model}_seq{seq}_kv{kv}.onnx"
    onnx.save(m, str(path))
    err.print(f"built {model} ({'decode' if kv else 'prefill'}: seq {seq}, kv {kv})")
    return path


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
    strict: StrictOpt = False,
    quiet: QuietOpt = False,
    time_passes: Annotated[bool, typer.Option(
        "--time-passes", help="print each pass's time (and its checks') on stderr")] = False,
) -> None:
    """Compile a model into a bundle: cmdq.json, memory.json, weights.npz, ir.json, ...

    MODEL may also be gpt2, llama or gpt2-small, built for --seq-len / --kv-len."""
    import tempfile

    from kernbench.cli.outdir import OutDir

    set_quiet(quiet)
    phases = Phases(err, enabled=not quiet)
    with OutDir(out) as stage, tempfile.TemporaryDirectory() as tmp:
        src = _named_model(model, seq_len, kv_len, Path(tmp))
        _compile(src, stage, topology, set_, qconfig, dump_after, calib_inputs, phases, strict,
                 time_passes)
    err.print(f"wrote the bundle {out}")


def _compile(model: Path, out: Path, topology: str, set_: list[str] | None,
             qconfig: Path | None, dump_after: list[str] | None,
             calib_inputs: Path | None, phases: Phases, strict: bool,
             time_passes: bool = False) -> None:
    from kernbench.host.flow import compile_model
    from kernbench.topology import load_topology

    topo = load_topology(topology, set_ or [])
    with phases.phase("compile"):
        state, pm = compile_model(model, topo, out, qconfig=qconfig,
                                  dump_after=tuple(dump_after or ()), calib_inputs=calib_inputs,
                                  progress=phases.update, strict=strict)
    err.print(f"compiled {model} for '{topo.name}': {len(state.cmdq.entries)} CMDQ entries")
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
    trace: TraceOpt = False,
    keep_bundle: Annotated[bool, typer.Option(
        "--keep-bundle", help="also write the compiled bundle to OUT/bundle (large: weights, "
                              "the model)")] = False,
    seq_len: SeqLenOpt = None,
    kv_len: KvLenOpt = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip report.html")] = False,
    strict: StrictOpt = False,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
    save_oplog: SaveOplogOpt = None,
) -> None:
    """Compile, simulate and report (and verify with --verify).

    MODEL may also be gpt2, llama or gpt2-small, built for --seq-len / --kv-len.
    Writes stats.json, summary.txt, report.html (+ trace.json with --trace, outputs.npz and
    verification.json with --verify, bundle/ with --keep-bundle) into --out."""
    import tempfile

    from kernbench.cli.outdir import OutDir
    from kernbench.host.flow import compile_model
    from kernbench.topology import load_topology

    set_quiet(quiet)
    phases = Phases(err, enabled=not quiet)
    topo = load_topology(topology, set_ or [])
    with OutDir(out) as stage, tempfile.TemporaryDirectory() as tmp:
        src = _named_model(model, seq_len, kv_len, Path(tmp))
        bundle = (stage if keep_bundle else Path(tmp)) / "bundle"
        with phases.phase("compile"):
            state, _ = compile_model(src, topo, bundle, qconfig=qconfig, calib_inputs=inputs,
                                     progress=phases.update, strict=strict)
        err.print(f"compiled {src.name}: {len(state.cmdq.entries)} CMDQ entries")
        ok = simulate_and_report(bundle, topo, stage, verify, inputs, dump_intermediates,
                                 trace, not no_report, phases=phases, as_json=json_,
                                 strict=strict, save_oplog=save_oplog)
    err.print(f"wrote {out}/")
    if not ok:
        raise typer.Exit(1)


def simulate_and_report(bundle: Path, topo, out: Path, verify: bool, inputs: Path | None,  # noqa: ANN001
                        dump_intermediates: bool, trace: bool, report: bool = True, *,
                        phases: Phases | None = None, as_json: bool = False,
                        strict: bool = False, save_oplog: Path | None = None) -> bool:
    """Simulate (and verify), write the results into `out`, print the summary on stdout
    (stats.json with `as_json`) and the tables on stderr. Returns False when the
    verification failed (the caller exits 1 after the files are in place)."""
    from kernbench.host.flow import simulate_bundle, summary_text
    from kernbench.host.verify import print_verdict
    from kernbench.report.summary import print_layers, print_summary

    res = simulate_bundle(bundle, topo, out, verify=verify, inputs=inputs,
                          dump_intermediates=dump_intermediates, trace=trace, report=report,
                          phase=phases.phase if phases else None, strict=strict,
                          save_oplog=save_oplog)
    print_summary(res.stats, err)
    if "layers" in res.stats:
        print_layers(res.stats, err)
    if res.verdict is not None:
        print_verdict(res.verdict, err)
    print_result(res.stats, summary_text(res.stats, res.verdict), as_json)
    return res.verdict is None or res.verdict.ok
