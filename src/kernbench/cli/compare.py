"""`kernbench compare A B [--model M] [--json]`: two runs side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import QuietOpt, err, print_json, set_quiet


@app.command("compare")
def compare_cmd(
    a: Annotated[str, typer.Argument(help="a preset or topology YAML (with --model), or a "
                                          "stats.json (or the --out folder holding it)")],
    b: Annotated[str, typer.Argument(help="the same sort as A: compared as B / A")],
    model: Annotated[Path | None, typer.Option(
        "--model", "-m", help="the model both topologies run (anything `run` takes)")] = None,
    qconfig: Annotated[Path | None, typer.Option("--qconfig", "-q",
                                                 help="quantization config YAML")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="new tokens")] = None,
    kv_len: Annotated[int | None, typer.Option("--kv-len", help="KV-cache length")] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="sequences per step")] = None,
    quiet: QuietOpt = False,
    json_: Annotated[bool, typer.Option(
        "--json", help="print the comparison as JSON to stdout instead of the summary line")
    ] = False,
) -> None:
    """Compare two presets on one model, or two stats.json files: a side-by-side table
    (stderr) and the ratios B / A (stdout: one line, or the whole comparison with --json)."""
    from rich.table import Table

    from kernbench.host.compare import compare_sides
    from kernbench.host.models import ShapeOptions
    from kernbench.report.compare import compare_stats, comparison_rows, headline

    set_quiet(quiet)
    sa, sb = compare_sides(a, b, model, ShapeOptions(batch, seq_len, kv_len), qconfig,
                           err.print)
    doc = compare_stats(sa, sb, a, b)
    t = Table(title=f"{b} against {a}")
    for col, just in (("figure", "left"), (f"A: {a}", "right"), (f"B: {b}", "right"),
                      ("B / A", "right")):
        t.add_column(col, justify=just)
    for row in comparison_rows(doc):
        t.add_row(*row)
    err.print(t)
    if json_:
        print_json(doc)
    else:
        print(headline(doc), flush=True)
