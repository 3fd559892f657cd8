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
    """Replay a saved op log on its saved initial memory (no compiler, no timing pass) and
    write the graph outputs to OUT/outputs.npz."""
    from kernbench.host.replay import replay
    from kernbench.ir.model import save_weights

    outputs, _ = replay(oplog_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "outputs.npz.tmp"
    save_weights(outputs, tmp)  # the deterministic npz writer the run uses
    tmp.replace(out / "outputs.npz")
    err.print(f"replayed {oplog_dir}: {len(outputs)} outputs → {out / 'outputs.npz'}")
