"""Which simulator core runs: the compiled modules or their source (same results, setup.py).

setup.py compiles the modules in `NATIVE` with mypyc where the install can, into one
shared library (they call each other directly). Python imports an extension module before
a source file of the same name. That is right for a fresh build, and wrong when a source
has been edited since (a stale build would run old code) or when the user asks for the
source (KERNBENCH_PURE_PYTHON=1: to compare the two, or to profile the Python).

`choose_core` (run when `kernbench` is imported, before any of these modules is) decides
for all of them at once, because a compiled module calls the compiled code of the others,
not what Python has imported: the source runs for every module in `NATIVE` when it is
asked for, when any extension was built from another source than the one beside it (the
build writes the source's SHA-256 beside each extension, `<stem>.built-sha256`; file times
are not used: an install from a wheel writes both files at once, in any order), or when
the compiled modules fail to import (their shared part missing or broken).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

#: the modules setup.py compiles (dotted names; setup.py reads this list)
NATIVE = (
    "kernbench.cmdq.hw",
    "kernbench.common.pe_commands",
    "kernbench.common.program",
    "kernbench.common.tile_plan",
    "kernbench.components.actions",
    "kernbench.components.arbiter",
    "kernbench.components.base",
    "kernbench.components.builtin.hbm_ctrl",
    "kernbench.components.builtin.m_cpu",
    "kernbench.components.builtin.pe_cpu",
    "kernbench.components.builtin.pe_dma",
    "kernbench.components.builtin.pe_fetch_store",
    "kernbench.components.builtin.pe_scheduler",
    "kernbench.components.channel",
    "kernbench.components.fabric",
    "kernbench.components.queues",
    "kernbench.components.signals",
    "kernbench.sim_engine.engine",
    "kernbench.report.json_text",
)
PURE_ENV = "KERNBENCH_PURE_PYTHON"
BUILT_SUFFIX = ".built-sha256"  # setup.py writes it
_ROOT = Path(__file__).resolve().parent  # the kernbench package


def module_path(name: str, root: Path = _ROOT) -> tuple[Path, str]:
    """(folder, stem) of module `name` ("kernbench.a.b") under the package folder `root`."""
    parts = name.split(".")[1:]
    return root.joinpath(*parts[:-1]), parts[-1]


def compiled_file(folder: Path, stem: str) -> Path | None:
    """The extension module `stem` in `folder` that Python would import, if any."""
    for suffix in EXTENSION_SUFFIXES:
        p = folder / f"{stem}{suffix}"
        if p.is_file():
            return p
    return None


def stale(folder: Path, stem: str) -> bool:
    """Whether `stem`'s extension in `folder` was built from another source than the one
    beside it (or has no record of its source). False without an extension."""
    if compiled_file(folder, stem) is None:
        return False
    try:
        built = (folder / f"{stem}{BUILT_SUFFIX}").read_text(encoding="ascii").strip()
    except OSError:
        return True
    return built != hashlib.sha256((folder / f"{stem}.py").read_bytes()).hexdigest()


def use_source(root: Path = _ROOT, pure: bool | None = None,
               names: tuple[str, ...] = NATIVE) -> bool:
    """Whether the sources of `names` must run instead of their extensions: asked for
    (`pure`, default from KERNBENCH_PURE_PYTHON) while an extension is there, or any
    extension built from another source."""
    places = [module_path(n, root) for n in names]
    if not any(compiled_file(f, s) for f, s in places):
        return False  # only the sources are there: Python imports them anyway
    if pure if pure is not None else bool(os.environ.get(PURE_ENV)):
        return True
    return any(stale(f, s) for f, s in places)


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `NATIVE` as their `.py` files, ahead of their extensions."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201
        if fullname not in NATIVE:
            return None
        folder, stem = module_path(fullname, self.root)
        file = folder / f"{stem}.py"
        loader = importlib.machinery.SourceFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def _compiled_imports() -> bool:
    """Whether the compiled modules load (one of them loads their shared library)."""
    try:
        importlib.import_module(NATIVE[0])
        return True
    except ImportError:
        for name in NATIVE:
            sys.modules.pop(name, None)
        return False


def _source_chosen() -> bool:
    return any(isinstance(f, _SourceFinder) for f in sys.meta_path)


def choose_core() -> None:
    """Run the sources of `NATIVE` when `use_source` says so or the build does not load."""
    if _source_chosen():
        return
    if use_source() or (compiled_file(*module_path(NATIVE[0])) and not _compiled_imports()):
        sys.meta_path.insert(0, _SourceFinder(_ROOT))


def core_kind() -> str:
    """"compiled" or "source": which simulator core this process runs (without importing it)."""
    if _source_chosen():
        return "source"
    return "compiled" if compiled_file(*module_path(NATIVE[0])) else "source"
