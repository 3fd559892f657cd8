"""`kernbench import MODEL.onnx -o ir.json [--qconfig q.yaml]`: ONNX -> NPU IR."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from kernbench.cli import app


@app.command("import")
def import_cmd(
    model: Path = typer.Argument(..., help="ONNX model file"),
    output: Path = typer.Option(Path("ir.json"), "-o", "--output", help="ir.json to write"),
    qconfig: Path | None = typer.Option(None, "--qconfig", help="QConfig YAML (W/A/KV bits)"),
    weights: Path | None = typer.Option(
        None, "--weights", help="weights file to write (default: weights.npz beside ir.json)"
    ),
    no_fuse: bool = typer.Option(False, "--no-fuse", help="keep primitive layers"),
) -> None:
    """Import an ONNX model into the NPU IR (ir.json + weights.npz)."""
    from kernbench.ir.onnx_import import import_onnx
    from kernbench.ir.qconfig import load_qconfig

    t0 = time.perf_counter()
    qc = load_qconfig(qconfig) if qconfig else None
    g = import_onnx(model, qc, fuse=not no_fuse)
    wpath = g.save(output, weights)
    counts: dict[str, int] = {}
    for n in g.nodes:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(
        f"imported {model} -> {output} (+ {wpath.name}): {len(g.nodes)} layers "
        f"[{summary}] in {time.perf_counter() - t0:.2f} s",
        file=sys.stderr,
    )
