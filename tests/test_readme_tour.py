"""Issue 39 item 8: every file or folder the README's tour writes is under `out/`, and the
tour runs in order without one command's output refusing the next.

The tour's commands are parsed from README.md (the sh block of "## A short tour"); each
output the command names (`-o/--out/--output`, `--svg`, `--save-oplog`, a `>` redirection)
must be under `out/`; a command with an output option must name it (its default is not a
folder of its own); the `--out` folders are distinct, none inside another, and no other
output lies inside one (an `--out` folder holding files kernbench did not write there is
refused: docs/errors.md)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

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


def _command(args: list[str]) -> Any:
    """The (sub-)command `args` run: its `.params` hold its options."""
    _register()
    cmd: Any = typer.main.get_command(app)
    for a in args:  # a group has list_commands (typer's own click may not be `click`'s)
        if not hasattr(cmd, "list_commands") or a not in cmd.list_commands(None):
            break
        cmd = cmd.get_command(None, a)
    return cmd


def test_the_tour_is_found():
    cmds = tour_commands()
    assert len(cmds) >= 15
    assert any(c[0] == "replay" for c in cmds) and any(c[0] == "topology" for c in cmds)


def _named(args: list[str], options: set[str]) -> list[Path]:
    return [Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a in options]


def tour_problems(cmds: list[list[str]]) -> list[str]:
    """What breaks the rules of the module docstring, one line each."""
    problems: list[str] = []
    out_dirs: list[Path] = []
    others: list[Path] = []
    for args in cmds:
        for path in _named(args, OUTPUT_OPTIONS):
            if path.parts[0] != "out" or path == Path("out"):
                problems.append(f"{args}: {path} is not under out/")
        cmd = _command(args)
        opts = {o for p in cmd.params for o in p.opts} & {"--out", "-o", "--output"}
        if opts and not _named(args, opts):
            problems.append(f"{args}: names no {sorted(opts)}")
        if "--out" in opts:
            out_dirs += _named(args, opts)
        else:
            others += _named(args, opts)
        others += _named(args, OUTPUT_OPTIONS - {"--out", "-o", "--output"})
    for i, d in enumerate(out_dirs):
        for p in out_dirs[i + 1:] + others:
            if p == d or d in p.parents:
                problems.append(f"{p} is inside the --out folder {d}")
    return problems


def test_every_output_of_the_tour_is_under_out():
    assert tour_problems(tour_commands()) == []


def test_the_tour_check_catches_what_breaks_a_tour():
    assert tour_problems([["topology", "show", "base", "--svg", "mesh.svg"]]) == [
        "['topology', 'show', 'base', '--svg', 'mesh.svg']: mesh.svg is not under out/"]
    assert tour_problems([["run", "gpt2"]]) == ["['run', 'gpt2']: names no ['--out', '-o']"]
    assert tour_problems([["run", "gpt2", "--verify", "--save-oplog", "out/a/oplog",
                           "--out", "out/a"]]) == ["out/a/oplog is inside the --out folder out/a"]
    assert tour_problems([["run", "gpt2", "--out", "out/a"],
                          ["kernel", "k.py::f", "--out", "out/a"]]) == [
        "out/a is inside the --out folder out/a"]
