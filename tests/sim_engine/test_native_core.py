"""The compiled simulator core (setup.py builds the modules of `kernbench.native.NATIVE`
with mypyc where it can) gives the same timing outputs as its source, and the source runs
when it is asked for or newer than the build."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from kernbench.native import (
    BUILT_SUFFIX,
    NATIVE,
    PURE_ENV,
    compiled_file,
    core_kind,
    module_path,
    use_source,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "kernbench"
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
_RUN = ("import sys; from kernbench.cli import main; from kernbench.native "
        "import core_kind; print(core_kind()); sys.exit(main(sys.argv[1:]))")
# contended links, HBM channels and command packets on a many-cube topology (UCIe); chip
# links with packet framing and ring flow control (ChipLink's own reservation)
CASES = {"large": ["-t", "large"], "t3k": ["-t", "t3k", "--tp", "2"]}


def _run(out: Path, pure: bool, topo: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    if pure:
        env[PURE_ENV] = "1"
    args = ["run", str(GPT2), *topo, "--no-report", "--quiet", "--trace", "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", _RUN, *args], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_and_source_servers_give_identical_outputs(tmp_path, case):
    topo = CASES[case]
    kinds = {_run(tmp_path / "a", False, topo), _run(tmp_path / "b", True, topo)}
    # the source always runs under KERNBENCH_PURE_PYTHON; the other run is compiled when
    # this install built it (the comparison is then between the two)
    built = compiled_file(*module_path("kernbench.components.fabric", PACKAGE))
    assert kinds == ({"compiled", "source"} if built else {"source"})
    for name in ("stats.json", "trace.json", "summary.txt", "layers.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def _package(root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        folder, stem = module_path(name, root)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.py").write_text(f"X = {stem!r}\n")


def _build(root: Path, name: str) -> None:
    """An extension of `name` beside its source, with the record of the source it is of."""
    folder, stem = module_path(name, root)
    (folder / f"{stem}{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    digest = hashlib.sha256((folder / f"{stem}.py").read_bytes()).hexdigest()
    (folder / f"{stem}{BUILT_SUFFIX}").write_text(digest + "\n")


def test_a_build_of_another_source_is_not_run(tmp_path):
    names = ("kernbench.a.b", "kernbench.c")
    _package(tmp_path, names)
    assert not use_source(tmp_path, pure=False, names=names)  # only sources: they run
    for name in names:
        _build(tmp_path, name)
    assert compiled_file(tmp_path / "a", "b") is not None
    assert not use_source(tmp_path, pure=False, names=names)  # a current build runs
    assert use_source(tmp_path, pure=True, names=names)       # unless the source is asked for
    (tmp_path / "c.built-sha256").unlink()
    assert use_source(tmp_path, pure=False, names=names)      # no record of its source
    _build(tmp_path, "kernbench.c")
    (tmp_path / "a" / "b.py").write_text("X = 2\n")
    # one module edited since the build: every module runs from source (the compiled
    # ones would call the old compiled code of the edited one)
    assert use_source(tmp_path, pure=False, names=names)


def test_the_build_list_names_modules_that_exist():
    for name in NATIVE:
        folder, stem = module_path(name, PACKAGE)
        assert (folder / f"{stem}.py").is_file(), name


def test_this_install_runs_its_build_when_it_is_current():
    if compiled_file(*module_path("kernbench.components.fabric", PACKAGE)) is None:
        assert core_kind() == "source"  # built without a C compiler: the source runs
        return
    assert use_source(PACKAGE) == bool(os.environ.get(PURE_ENV))
    assert core_kind() == ("source" if os.environ.get(PURE_ENV) else "compiled")
    for name in NATIVE:  # all or none
        assert sys.modules[name].__file__.endswith(".py") == (core_kind() == "source")
