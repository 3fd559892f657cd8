"""`kernbench demo`: compile the bundled tiny GPT-2, simulate it on the default NPU,
verify the numbers, and write out/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import JsonOpt, QuietOpt, SetOpt, TopologyOpt, TraceOpt, err


@app.command("demo")
def demo(
    topology: TopologyOpt = "small",
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    verify: Annotated[bool, typer.Option("--verify/--no-verify",
                                         help="data pass + checks (default on)")] = True,
    trace: TraceOpt = True,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Run the bundled tiny GPT-2 end to end and print its report."""
    from kernbench.cli.compile import run_cmd
    from kernbench.models import DEMO_MODEL

    err.print(f"[bold]kernbench demo[/]: {DEMO_MODEL.name} (2 layers, d=64, 16 tokens, W8A8) "
              f"on '{topology}'")
    run_cmd(DEMO_MODEL, topology=topology, set_=set_, qconfig=None, out=out, verify=verify,
            inputs=None, dump_intermediates=False, trace=trace, keep_bundle=True, seq_len=None,
            kv_len=None, no_report=False, strict=False, quiet=quiet, json_=json_)
