"""The end-to-end flows the CLI exposes: compile a model, simulate a bundle (with the data
pass and verification on request), and run = compile + simulate + report (+ verify)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.errors import InputError


@dataclass
class SimResult:
    stats: dict[str, Any]
    verdict: Any = None
    outputs: dict[str, np.ndarray] | None = None
    written: list[Path] | None = None


def compile_model(model: Path, topology: Any, out: Path, *, qconfig: Path | None = None,
                  dump_after: tuple[str, ...] = (), progress: Any = None,
                  calib_inputs: Path | None = None):  # noqa: ANN201
    """Compile; activation scales are calibrated on `calib_inputs` (an .npz keyed by input
    name) or, without it, on seeded random inputs valid for the model."""
    from kernbench.compiler.pipeline import load_model

    graph, source = load_model(Path(model), qconfig)
    return compile_loaded(graph, source, topology, out, dump_after=dump_after,
                          progress=progress, calib_inputs=calib_inputs)


def compile_loaded(graph: Any, source: Path | None, topology: Any, out: Path, *,
                   dump_after: tuple[str, ...] = (), progress: Any = None,
                   calib_inputs: Path | None = None):  # noqa: ANN201
    """compile_model for a graph already loaded (or built, or truncated for replay)."""
    from kernbench.compiler.pipeline import compile_graph, write_bundle
    from kernbench.compiler.state import CompileOptions

    opts = CompileOptions(calib_inputs=load_inputs(calib_inputs, graph) if calib_inputs
                          else None)
    state, pm = compile_graph(graph, topology, opts, dump_after=dump_after,
                              dump_dir=Path(out).parent if dump_after else None,
                              progress=progress)
    write_bundle(state, Path(out), source)
    return state, pm


def load_inputs(path: Path | None, graph: Any, seed: int = 0) -> dict[str, np.ndarray]:
    from kernbench.compiler.inputs import default_inputs

    if path is None:
        return default_inputs(graph, seed)
    try:
        with np.load(path, allow_pickle=False) as z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read inputs: {e}", file=str(path)) from None
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise InputError(f"missing input(s) {', '.join(missing)}", file=str(path))
    return check_inputs(feeds, graph, str(path))


def check_inputs(feeds: dict[str, np.ndarray], graph: Any, file: str) -> dict[str, np.ndarray]:
    """Inputs as the model declares them: shape, a safe cast to the dtype, token ids inside
    the vocabulary. The cast arrays are what every consumer (simulator, interpreter,
    onnxruntime) receives."""
    from kernbench.compiler.inputs import vocab_size
    from kernbench.numerics.dtypes import np_dtype

    out = {}
    for tid in graph.inputs:
        t = graph.tensors[tid]
        x = np.asarray(feeds[tid])
        if list(x.shape) != list(t.shape):
            raise InputError(f"shape {list(x.shape)}, the model expects {t.shape}", file=file,
                             where=f"input '{tid}'")
        want = np_dtype(t.dtype)
        if x.dtype != want:
            if want.kind in "iub" and x.dtype.kind == "f" and not np.all(np.mod(x, 1) == 0):
                raise InputError(f"{x.dtype} values that are not integers, the model expects "
                                 f"{t.dtype}", file=file, where=f"input '{tid}'")
            x = x.astype(want)
        if want.kind in "iu":
            vocab = vocab_size(graph, tid)
            if vocab is not None and x.size and (x.min() < 0 or x.max() >= vocab):
                raise InputError(f"ids must lie in [0, {vocab}) (got {x.min()}..{x.max()})",
                                 file=file, where=f"input '{tid}'")
        out[tid] = x
    return out


def simulate_bundle(program: Path, topology: Any, out: Path, *, verify: bool = False,
                    inputs: Path | None = None, dump_intermediates: bool = False,
                    trace: bool = True, report: bool = True,
                    save_oplog: Path | None = None, post_stats: Any = None,
                    watch: Any = None) -> SimResult:
    """Simulate a bundle (with the data pass and verification on request) and write
    stats.json, trace.json, summary.txt, report.html. `post_stats(stats)` may amend the
    stats before anything is written (replay, LLM figures); `watch(entries, layer_ids)` is
    called before the timing run starts and returns a function that stops it (progress)."""
    from kernbench.cmdq.io import load_program
    from kernbench.report.stats import write_json

    program = Path(program)
    bundle_dir = program if program.is_dir() else program.parent
    cmdq_path = program / "cmdq.json" if program.is_dir() else program
    prog = load_program(cmdq_path)
    verdict, outputs = None, None
    if verify:
        from kernbench.host.bundle import Bundle, run_with_data
        from kernbench.host.verify import verify_outputs

        bundle = Bundle.load(bundle_dir)
        from kernbench.ir.model import is_shape_only

        if is_shape_only(bundle.graph):
            raise InputError("--verify needs weight values; this bundle is of a shape-only "
                             "model (timing only)", file=str(bundle_dir))
        feeds = load_inputs(inputs, bundle.graph)
        run, outputs, store = run_with_data(bundle, prog, topology, feeds, trace=trace,
                                            save_oplog=save_oplog)
        source = bundle_dir / "model.onnx"
        verdict = verify_outputs(bundle, outputs, feeds, store,
                                 source if source.exists() else None,
                                 dump_intermediates=dump_intermediates)
    else:
        from kernbench.host.simulate import simulate_program

        if save_oplog is not None:
            raise InputError("--save-oplog saves the data pass: it needs --verify",
                             field="--save-oplog")

        run = simulate_program(prog, topology, file=str(cmdq_path), trace=trace, watch=watch)
    stats = run.stats()
    roof = bundle_dir / "roofline.json"
    if roof.exists():
        from kernbench.compiler.roofline import layer_report

        try:
            bounds = json.loads(roof.read_text(encoding="utf-8"))
        except ValueError as e:
            raise InputError(f"unreadable: {e}", file=str(roof)) from None
        layers = layer_report(bounds, stats["entries"])
        stats["layers"] = layers
        total_bound = sum(v["bound_ns"] for v in layers.values())
        stats["roofline_fraction"] = round(total_bound / stats["total_ns"], 6) \
            if stats["total_ns"] else 0.0
        comp = round(sum(v["compute_bound_ns"] for v in layers.values()), 3)
        mem = round(sum(v["memory_bound_ns"] for v in layers.values()), 3)
        stats["model_bound"] = {"compute_bound_ns": comp, "memory_bound_ns": mem,
                                "bound_by": "compute" if comp >= mem else "memory"}
    if post_stats is not None:
        stats = post_stats(stats)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "stats.json"]
    write_json(stats, out / "stats.json")
    trace_obj = run.trace() if trace else None
    if trace_obj is not None:
        write_json(trace_obj, out / "trace.json")
        written.append(out / "trace.json")
    if outputs is not None:
        from kernbench.ir.model import save_weights

        tmp = out / "outputs.npz.tmp"
        save_weights(outputs, tmp)  # deterministic npz (fixed zip timestamps)
        tmp.replace(out / "outputs.npz")
        written.append(out / "outputs.npz")
        write_json(verdict.to_json(), out / "verification.json")
        written.append(out / "verification.json")
    (out / "summary.txt").write_text(summary_text(stats, verdict), encoding="utf-8")
    written.append(out / "summary.txt")
    if report:
        from kernbench.report.html import write_report

        written.append(write_report(out, stats, trace_obj, verdict, topology))
    return SimResult(stats, verdict, outputs, written)


def summary_text(stats: dict[str, Any], verdict: Any = None) -> str:
    lines = [f"total {stats['total_ns']:.1f} ns = {stats['total_cycles']} cycles at "
             f"{stats['clock_ghz']} GHz on {stats['topology']}"]
    b = stats["bottleneck"]
    lines.append(f"bottleneck: {b['component']} ({b['kind']}), {100 * b['utilization']:.1f}% busy")
    if "roofline_fraction" in stats:
        lines.append(f"roofline fraction (whole model): {stats['roofline_fraction']:.3f}")
        mb = stats["model_bound"]
        lines.append(f"the model is {mb['bound_by']}-bound: Σ compute bound "
                     f"{mb['compute_bound_ns']:.1f} ns vs Σ memory bound "
                     f"{mb['memory_bound_ns']:.1f} ns")
        lines.append("")
        lines.append(f"{'layer':28s} {'op':12s} {'ns':>10s} {'bound ns':>10s} {'frac':>6s} "
                     f"{'bound by':8s} busiest")
        for lid, layer in sorted(stats["layers"].items(), key=lambda kv: -kv[1]["ns"]):
            lines.append(f"{lid:28s} {layer['op_type']:12s} {layer['ns']:10.1f} "
                         f"{layer['bound_ns']:10.1f} {layer['roofline_fraction']:6.3f} "
                         f"{layer['bound_by']:8s} {layer['bottleneck']}")
    if "llm" in stats:
        from kernbench.report.llm import llm_lines

        lines.append("")
        lines.extend(llm_lines(stats["llm"]))
    if "replay" in stats:
        r = stats["replay"]
        lines.append(f"replay: {r['simulated_blocks']} of {r['blocks']} identical blocks "
                     f"simulated, period {r['block_period_ns']:.1f} ns (simulated periods "
                     + ", ".join(f"{p:.1f}" for p in r["periods_ns"])
                     + " ns); per-layer rows are the simulated blocks")
    if verdict is not None:
        lines.append("")
        lines.append("verification: " + ("PASS" if verdict.ok else "FAIL"))
        for c in verdict.checks:
            lines.append(f"  {c.output} vs {c.reference}: max abs {c.max_abs_err:.3g}, "
                         f"cosine {c.cosine:.6f} ({c.threshold}) {'ok' if c.ok else 'FAIL'}")
        if verdict.first_divergence:
            lines.append(f"  first diverging layer: {verdict.first_divergence['layer']}")
    return "\n".join(lines) + "\n"
