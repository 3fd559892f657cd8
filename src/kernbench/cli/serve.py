"""`kernbench serve MODEL -t TOPOLOGY (--rate R | --trace FILE.csv) --out DIR ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import JsonOpt, QuietOpt, SetOpt, TopologyOpt, err, set_quiet
from kernbench.cli.compile import RoutingOpt, RoutingSameOpt, RoutingSeedOpt

MODEL_HELP = ("anything `run` takes that can be built for any batch and length: gpt2 | "
              "llama | gpt2-small, a Hugging Face config.json, an ONNX model with symbolic dims")

SloOpt = Annotated[str | None, typer.Option(
    "--slo", help="goodput objectives KEY=VALUEUNIT,...: KEY ttft, tpot or e2e, UNIT s, "
                  "ms, us (µs) or ns; e.g. ttft=1s,tpot=50ms")]
StepCacheOpt = Annotated[Path | None, typer.Option(
    "--step-cache", help="JSON file keeping simulated programs across runs (same model, "
                         "qconfig, routing, topology and version)")]
WorkersOpt = Annotated[int | None, typer.Option("--workers", "-j", help=(
    "processes simulating step programs side by side (default: the CPU count, started "
    "once the programs simulated in the serve process have taken 20 CPU s)"))]


@app.command("serve")
def serve_cmd(
    model: Annotated[Path, typer.Argument(help=MODEL_HELP)],
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    requests: Annotated[int | None, typer.Option(
        "--requests", "-n", help="requests to draw (Poisson) \\[default: 100]")] = None,
    rate: Annotated[float | None, typer.Option("--rate", help=(
        "Poisson arrivals, requests per second (required without --trace)"))] = None,
    prompt_len: Annotated[str | None, typer.Option(
        "--prompt-len", help="N, LO:HI (uniform) or lognormal:MEDIAN:SIGMA[:MAX] "
                             "\\[default: 512]")] = None,
    output_len: Annotated[str | None, typer.Option(
        "--output-len", help="N, LO:HI (uniform) or lognormal:MEDIAN:SIGMA[:MAX] "
                             "\\[default: 128]")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="seed of the drawn arrivals and lengths \\[default: 0]")] = None,
    trace: Annotated[Path | None, typer.Option(
        "--trace", help="CSV arrival_s,prompt_tokens,output_tokens instead of drawing")] = None,
    policy: Annotated[str, typer.Option(
        "--policy", help="static | continuous | chunked | disaggregated (prefill and "
                         "decode chips of a multi-chip system)")] = "continuous",
    prefill_chips: Annotated[int | None, typer.Option(
        "--prefill-chips", help="disaggregated: chips that prefill, the rest decode "
                                "\\[default: half]")] = None,
    max_batch: Annotated[int, typer.Option(
        "--max-batch", help="sequences running at once (static: the batch size)")] = 64,
    max_batch_tokens: Annotated[int | None, typer.Option(
        "--max-batch-tokens", help="new tokens per step (the prefill budget; not for static) "
                                   "\\[default: 8192]")] = None,
    block_tokens: Annotated[int, typer.Option(
        "--block-tokens", help="tokens per KV-cache block")] = 16,
    kv_fraction: Annotated[float | None, typer.Option(
        "--kv-fraction", help="share of the HBM left by the weights given to the KV "
                              "cache \\[default: 0.9]")] = None,
    kv_blocks: Annotated[int | None, typer.Option(
        "--kv-blocks", help="KV-cache size in blocks (instead of --kv-fraction)")] = None,
    slo: SloOpt = None,
    exact_steps: Annotated[bool, typer.Option(
        "--exact-steps", help="simulate every distinct step shape (no buckets)")] = False,
    qconfig: Annotated[Path | None, typer.Option("--qconfig", "-q",
                                                 help="quantization config YAML")] = None,
    step_cache: StepCacheOpt = None,
    workers: WorkersOpt = None,
    replay_blocks: Annotated[int | None, typer.Option("--replay-blocks", help=(
        "decoder blocks a step program simulates before replaying the rest (at least 3; "
        "more let a long-context warm-up settle) \\[default: 4]"))] = None,
    routing: RoutingOpt = None,
    routing_seed: RoutingSeedOpt = None,
    routing_same_layers: RoutingSameOpt = False,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Serve many requests on a simulated NPU: a scheduler policy batches them, each
    step's time comes from a compiled and simulated program. Writes requests.csv,
    occupancy.csv, stats.json, trace.json and report.html into --out (docs/serving.md)."""
    import tempfile

    from kernbench.cli.outdir import OutDir
    from kernbench.cli.progress import Phases
    from kernbench.host.serve import ServeOptions, serve
    from kernbench.topology import load_topology

    set_quiet(quiet)
    topo = load_topology(topology, set_ or [])
    opts = ServeOptions(policy=policy, requests=requests, rate=rate, prompt_len=prompt_len,
                        output_len=output_len, seed=seed, trace=trace, slo=slo,
                        max_batch=max_batch, max_batch_tokens=max_batch_tokens,
                        block_tokens=block_tokens, kv_fraction=kv_fraction,
                        kv_blocks=kv_blocks, exact_steps=exact_steps, qconfig=qconfig,
                        step_cache=step_cache, prefill_chips=prefill_chips, workers=workers,
                        replay_blocks=replay_blocks, routing=routing,
                        routing_seed=routing_seed, routing_same_layers=routing_same_layers)
    with OutDir(out) as stage, tempfile.TemporaryDirectory() as tmp:
        stats = serve(model, topo, stage, opts, Path(tmp), note=err.print,
                      phase=Phases(err, enabled=not quiet).phase)
    _print_results(stats["serve"]["results"], out / "stats.json" if json_ else None)
    err.print(f"wrote {out}/")


def _print_results(r: dict, stats_json: Path | None) -> None:
    """The percentiles, throughput and goodput on stdout as text, or with --json the
    stats.json written (`stats_json`)."""
    import sys

    from kernbench.report.serving import serve_lines

    if stats_json is not None:
        sys.stdout.write(stats_json.read_text(encoding="utf-8"))
    else:
        sys.stdout.write("\n".join(serve_lines(r)) + "\n")
