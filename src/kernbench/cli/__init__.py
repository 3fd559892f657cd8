"""The `kernbench` command line (typer).

Each sub-command lives in its own module of this package and registers itself on `app`.
Machine-readable results go to files or stdout; progress and tables go to stderr.
Exit codes: 0 ok, 1 verification failed, 2 invalid input, 3 internal error.
"""

from __future__ import annotations

import sys

import typer

from kernbench.errors import KernbenchError

app = typer.Typer(
    name="kernbench",
    help="NPU simulator and offline compiler.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    import importlib

    for name in ("topology", "demo", "validate", "simulate", "ir", "compile", "kernel", "sweep",
                 "replay"):
        try:
            importlib.import_module(f"kernbench.cli.{name}")
        except ModuleNotFoundError as e:  # a layer not built yet
            if e.name != f"kernbench.cli.{name}":
                raise


def main(argv: list[str] | None = None) -> int:
    """Run the app and map kernbench errors to exit codes; returns the code."""
    _register()
    try:
        # standalone mode: usage errors print their own message and exit 2.
        app(args=argv, standalone_mode=True)
    except KernbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:
        import traceback

        traceback.print_exc()
        print(f"internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
