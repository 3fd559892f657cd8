"""The `kernbench` command line (typer).

Command modules import the layers they use inside the command functions: `kernbench
--help` and argument errors then answer without loading numpy, onnx or the simulator.

Each sub-command lives in its own module of this package and registers itself on `app`.
Results go to files and stdout (the summary, or stats.json with --json); diagnostics,
progress and tables go to stderr. Exit codes (docs/errors.md): 0 ok, 1 verification
failed, 2 invalid input (one line), 3 internal error (a bug), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import errno
import sys

import typer
from typer import Abort
from typer._click.exceptions import ClickException  # typer's own click (pinned)

# re-exported where benchmarks and older trees' scripts look for them
from kernbench.common.gc_pause import GC_THRESHOLDS, tune_gc  # noqa: F401
from kernbench.common.heap import tune_heap  # noqa: F401
from kernbench.common.tuning import tune_process
from kernbench.errors import KernbenchError

app = typer.Typer(
    name="kernbench",
    help="NPU simulator and offline compiler.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from kernbench import __version__
        from kernbench.native import core_kind

        # the reservation servers: compiled by setup.py where it could, else the source
        print(f"kernbench {__version__} (simulator core: {core_kind()})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """NPU simulator and offline compiler."""


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    import importlib

    for name in ("topology", "demo", "validate", "simulate", "ir", "compile", "kernel", "sweep", "serve",
                 "replay", "listing", "compare", "collective"):
        try:
            importlib.import_module(f"kernbench.cli.{name}")
        except ModuleNotFoundError as e:  # a layer not built yet
            if e.name != f"kernbench.cli.{name}":
                raise


def main(argv: list[str] | None = None) -> int:
    """Run the app and map kernbench errors to exit codes; returns the code."""
    from kernbench.cli.interrupt import Watchdog

    np = sys.modules.get("numpy")
    float_errors = np.geterr() if np is not None else None
    try:
        from kernbench.errors import warnings_once

        # a command that compiles a model several times (the PE choice's candidates, the
        # survey and the streamed program) says each warning once
        with Watchdog(), warnings_once():  # Ctrl-C swallowed or stuck: still ends (130)
            from kernbench.cli.common import set_quiet

            set_quiet(False)  # --quiet lasts one command (main may run several in one process)
            _register()
            # not standalone: a usage error comes here as an exception (one line, below);
            # typer returns a typer.Exit's code, a KeyboardInterrupt in a command as 130
            code = app(args=argv, prog_name="kernbench", standalone_mode=False)
        if isinstance(code, int) and code:
            return _interrupted() if code == INTERRUPTED else code
    except ClickException as e:
        return _usage_error(e, sys.argv[1:] if argv is None else argv)
    except Abort:  # end of input where a command read it
        print("error: aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted()
    except KernbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        return _interrupted() if code == INTERRUPTED else code
    except OSError as e:
        if e.errno not in _STORAGE_ERRNOS:
            return _internal_error(e)
        # the machine's storage, not a bug: a full disk, a quota, a read-only file system
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}cannot write: {e.strerror}", file=sys.stderr)
        return 2
    except Exception as e:
        return _internal_error(e)
    finally:
        _restore_float_errors(float_errors)
    return 0


#: OSError numbers of a write the storage refused: one `error:` line, exit 2
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def _internal_error(e: Exception) -> int:
    """A bug: the traceback, one `internal error:` line, exit 3."""
    import traceback

    traceback.print_exc()
    print(f"internal error: {type(e).__name__}: {e}", file=sys.stderr)
    return 3


def _usage_error(e: ClickException, argv: list[str]) -> int:
    """A bad flag or argument as one `error:` line naming the command (exit 2); no
    arguments at all print the help typer printed already."""
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError":
        return e.exit_code
    msg = " ".join(e.format_message().split())
    # the parser raises an option without its value before the command has a context
    path = ctx.command_path if ctx is not None else _command_path(argv)
    where = f"{path}: " if path else ""
    hint = f" (see {path} --help)" if path else ""
    print(f"error: {where}{msg}{hint}", file=sys.stderr)
    return e.exit_code


def _command_path(argv: list[str]) -> str | None:
    """`kernbench COMMAND` of the command `argv` names first, if it names one."""
    from typer.main import get_command

    first = next((a for a in argv if not a.startswith("-")), None)
    commands = getattr(get_command(app), "commands", {})
    return f"kernbench {first}" if first in commands else None


def _restore_float_errors(saved: dict[str, str] | None) -> None:
    """numpy's floating-point warnings as they were before the command (numpy's defaults if
    it was not loaded yet): a command with NaN/Inf input switches them off
    (host.flow.check_finite), for that command only."""
    np = sys.modules.get("numpy")
    if np is not None:
        np.seterr(**(saved or {"divide": "warn", "over": "warn", "under": "ignore",
                               "invalid": "warn"}))


INTERRUPTED = 130


def _interrupted() -> int:
    from kernbench.cli.interrupt import discard_stages

    discard_stages()
    print("interrupted", file=sys.stderr)
    return INTERRUPTED


def run() -> None:
    """Console-script entry point."""
    tune_process()
    sys.exit(main())
