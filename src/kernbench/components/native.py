"""Which `fabric` runs: its compiled extension or its source (same results, see setup.py).

Python imports an extension module before a source file of the same name. That is right
for a fresh build, and wrong when the source has been edited since (a stale build would
run old code) or when the user asks for the source (KERNBENCH_PURE_PYTHON=1: to compare
the two, or to profile the Python). In those cases `choose_fabric` loads `fabric.py`
itself, before anything imports the module. The build writes the SHA-256 of the source
it compiled beside the extension (`fabric.built-sha256`); a build is current when that is
the source's (file times are not used: an install from a wheel writes both files at
once, in any order).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

MODULE = "kernbench.components.fabric"
PURE_ENV = "KERNBENCH_PURE_PYTHON"
BUILT_SUFFIX = ".built-sha256"  # setup.py writes it


def compiled_file(folder: Path, stem: str = "fabric") -> Path | None:
    """The extension module `stem` in `folder` that Python would import, if any."""
    for suffix in EXTENSION_SUFFIXES:
        p = folder / f"{stem}{suffix}"
        if p.is_file():
            return p
    return None


def use_source(folder: Path, stem: str = "fabric", pure: bool | None = None) -> bool:
    """Whether `stem`'s source must run instead of its extension: asked for (`pure`,
    default from KERNBENCH_PURE_PYTHON), or the extension built from another source (or
    with no record of its source)."""
    if compiled_file(folder, stem) is None:
        return False  # only the source is there: Python imports it anyway
    if pure if pure is not None else bool(os.environ.get(PURE_ENV)):
        return True
    try:
        built = (folder / f"{stem}{BUILT_SUFFIX}").read_text(encoding="ascii").strip()
    except OSError:
        return True
    return built != hashlib.sha256((folder / f"{stem}.py").read_bytes()).hexdigest()


def choose_fabric() -> None:
    """Load `fabric.py` as `kernbench.components.fabric` when `use_source` says so."""
    if MODULE in sys.modules:
        return
    folder = Path(__file__).resolve().parent
    if not use_source(folder):
        if compiled_file(folder) is None:
            return
        try:  # a build whose shared part is missing or broken leaves the source to run
            importlib.import_module(MODULE)
            return
        except ImportError:
            sys.modules.pop(MODULE, None)
    spec = importlib.util.spec_from_file_location(MODULE, folder / "fabric.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = mod
    spec.loader.exec_module(mod)


def fabric_kind() -> str:
    """"compiled" or "source": which `fabric` this process runs."""
    import kernbench.components.fabric as mod  # the module as it was chosen

    return "source" if str(mod.__file__).endswith(".py") else "compiled"
