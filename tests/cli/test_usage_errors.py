"""A bad flag, a missing argument or an unknown command is invalid input like any other:
exactly one `error:` line naming the command, exit 2, nothing on stdout (docs/errors.md).
No arguments at all print the help."""

from __future__ import annotations

import pytest

from kernbench.cli import main


@pytest.mark.parametrize(("args", "needle"), [
    (["serve", "gpt2", "--rate", "abc"], "kernbench serve: Invalid value for '--rate'"),
    (["serve", "gpt2", "--polcy", "x"], "No such option: --polcy"),
    (["serve"], "Missing argument"),
    (["run", "gpt2", "--seq-len", "x"], "kernbench run: Invalid value for '--seq-len'"),
    (["simulate"], "kernbench simulate: Missing argument"),
    (["nosuch"], "kernbench: No such command 'nosuch'"),
    # an option without its value fails before the command has a context: still named
    (["serve", "gpt2", "--rate"], "kernbench serve: Option '--rate' requires an argument"),
    (["run", "gpt2", "--out"], "kernbench run: Option '--out' requires an argument"),
])
def test_a_usage_error_is_one_line_exit_2(capsys, args, needle):
    assert main(args) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert "--help" in lines[0]


def test_no_arguments_print_the_help(capsys):
    assert main([]) == 2
    cap = capsys.readouterr()
    assert "serve" in cap.out and "simulate" in cap.out and "error" not in cap.err


def test_help_and_version_still_exit_0(capsys):
    assert main(["serve", "--help"]) == 0
    assert "--step-cache" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("kernbench ")


def test_python_dash_m_kernbench_is_the_command_line():
    # `python -m kernbench` runs the console script's command line: the same exit code and
    # one error line for a usage error, the help for --help
    import subprocess
    import sys

    bad = subprocess.run([sys.executable, "-m", "kernbench", "nosuch"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("error: ") and "No such command 'nosuch'" in line
    ok = subprocess.run([sys.executable, "-m", "kernbench", "--help"], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0 and "serve" in ok.stdout
