"""`kernbench replay OPLOG_DIR [--out DIR]`: run a saved data pass alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import err


@app.command("replay")
def replay_cmd(
    oplog_dir: Annotated[Path, typer.Argument(help="folder written by --save-oplog")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
) -> None:
    """Replay a saved op log on its saved initial memory (no compiler, no timing pass),
    write the graph outputs to OUT/outputs.npz and print the verdict on stdout: bit-identical
    to the run's saved outputs, or the first difference (output, index, values; exit 1)."""
    from kernbench.host.replay import replay, replay_verdict
    from kernbench.ir.model import save_weights

    outputs, _ = replay(oplog_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "outputs.npz.tmp"
    save_weights(outputs, tmp)  # the deterministic npz writer the run uses
    tmp.replace(out / "outputs.npz")
    err.print(f"replayed {oplog_dir}: {len(outputs)} outputs → {out / 'outputs.npz'}")
    same, line = replay_verdict(oplog_dir, out / "outputs.npz")
    print(f"replay: {line}", flush=True)
    if same is False:
        raise typer.Exit(1)
