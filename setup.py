"""Build: pure Python, plus the simulator's core compiled by mypyc when it can.

The modules `kernbench.native.NATIVE` lists (every link, port and memory channel
reservation, the per-command state machines of M_CPU and PE_SCHEDULER, the engines'
channels, tile tokens and program entries, the JSON writer: the code that runs per
command) are compiled to C extensions with mypyc when mypy and a C compiler are at hand
(ADR-1315, ADR-1320). Without them, or when the compile fails, the package installs as
pure Python and runs the same source: same results, slower. Set KERNBENCH_PURE_PYTHON=1
to build (and run) without it.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

BUILT_SUFFIX = ".built-sha256"  # kernbench/native.py reads it


def _native() -> list[str]:
    """The source files of `NATIVE` in src/kernbench/native.py (read, not imported: the
    package is not installed while it is being built)."""
    tree = ast.parse(Path("src/kernbench/native.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "NATIVE":
            names = ast.literal_eval(node.value)
            return ["src/" + n.replace(".", "/") + ".py" for n in names]
    raise LookupError("NATIVE not found in src/kernbench/native.py")


NATIVE = _native()


class OptionalBuildExt(build_ext):
    """Build the compiled modules if possible; a failure leaves the pure-Python package."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler, no headers: pure Python then
            _skip(f"{type(e).__name__}: {e}")

    def build_extension(self, ext) -> None:  # noqa: ANN001
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            _skip(f"{ext.name}: {type(e).__name__}: {e}")
            return
        # the source this build is of, beside it: the package runs the source instead
        # when it differs (an edit since the build; kernbench/native.py). Written where
        # a wheel takes its files and into the package's own folder, where an editable
        # install's extension is copied
        for path in NATIVE:
            mod = path[len("src/"):-len(".py")].replace("/", ".")
            if ext.name != mod:
                continue
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() + "\n"
            name = Path(path).stem + BUILT_SUFFIX
            package = self.get_finalized_command("build_py").get_package_dir(
                mod.rpartition(".")[0])
            for folder in (Path(self.get_ext_fullpath(ext.name)).parent, Path(package)):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(digest)


def _skip(why: str) -> None:
    print(f"kernbench: building without the compiled simulator core ({why}); the "
          "package runs as pure Python", file=sys.stderr)


def _ext_modules() -> list:
    if os.environ.get("KERNBENCH_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as e:
        _skip(f"no mypyc: {e}")
        return []
    try:
        exts = mypycify(NATIVE, opt_level="3")
    except (Exception, SystemExit) as e:  # noqa: BLE001 - mypy exits on a type error
        _skip(f"mypyc: {type(e).__name__}: {e}")
        return []
    for ext in exts:
        # timing outputs are byte-identical on any CPU: no fused multiply-add contraction
        ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off"]
    return exts


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
