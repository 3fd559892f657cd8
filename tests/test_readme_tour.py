"""Issue 39 item 8: every file or folder the README's tour writes is under `out/`.

The tour's commands are parsed from README.md (the sh block of "## A short tour"); each
output the command names (`-o/--out/--output`, `--svg`, `--save-oplog`, a `>` redirection)
must be under `out/`, and a command that names no `--out` must default to `out`
(read from the command's own option, so a changed default fails here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import typer.main

from kernbench.cli import _register, app

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_OPTIONS = {"-o", "--out", "--output", "--svg", "--save-oplog", ">"}


def tour_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("kernbench "):
                cmds.append(shlex.split(line)[1:])
    return cmds


def _command(args: list[str]) -> click.Command:
    _register()
    cmd: click.Command = typer.main.get_command(app)
    ctx = click.Context(cmd)
    for a in args:
        if not isinstance(cmd, click.Group) or a not in cmd.list_commands(ctx):
            break
        cmd = cmd.get_command(ctx, a)  # type: ignore[assignment]
    return cmd


def test_the_tour_is_found():
    cmds = tour_commands()
    assert len(cmds) >= 15
    assert any(c[0] == "replay" for c in cmds) and any(c[0] == "topology" for c in cmds)


def test_every_output_of_the_tour_is_under_out():
    for args in tour_commands():
        named = [args[i + 1] for i, a in enumerate(args[:-1]) if a in OUTPUT_OPTIONS]
        for path in named:
            assert Path(path).parts[0] == "out", (args, path)
        cmd = _command(args)
        out_param = next((p for p in cmd.params if "--out" in p.opts), None)
        if out_param is not None and not any(a in ("-o", "--out") for a in args):
            assert Path(str(out_param.default)) == Path("out"), (args, out_param.default)
