"""The compiled reservation servers (setup.py builds `components/fabric.py` with mypyc
where it can) give the same timing outputs as their source, and the source runs when it
is asked for or newer than the build."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from kernbench.components.native import (
    BUILT_SUFFIX,
    PURE_ENV,
    compiled_file,
    fabric_kind,
    use_source,
)

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
_RUN = ("import sys; from kernbench.cli import main; from kernbench.components.native "
        "import fabric_kind; print(fabric_kind()); sys.exit(main(sys.argv[1:]))")
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
    folder = ROOT / "src" / "kernbench" / "components"
    assert kinds == ({"compiled", "source"} if compiled_file(folder) else {"source"})
    for name in ("stats.json", "trace.json", "summary.txt", "layers.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_build_of_another_source_is_not_run(tmp_path):
    src = tmp_path / "fabric.py"
    src.write_text("X = 1\n")
    assert not use_source(tmp_path, pure=False)  # no extension: Python imports the source
    ext = tmp_path / f"fabric{EXTENSION_SUFFIXES[0]}"
    ext.write_bytes(b"")
    assert compiled_file(tmp_path) == ext
    assert use_source(tmp_path, pure=False)      # no record of what it was built from
    record = tmp_path / f"fabric{BUILT_SUFFIX}"
    record.write_text(hashlib.sha256(src.read_bytes()).hexdigest() + "\n")
    assert not use_source(tmp_path, pure=False)  # built from this source: it runs
    assert use_source(tmp_path, pure=True)       # unless the source is asked for
    src.write_text("X = 2\n")
    assert use_source(tmp_path, pure=False)      # the source edited since the build


def test_this_install_runs_its_build_when_it_is_current():
    folder = ROOT / "src" / "kernbench" / "components"
    if compiled_file(folder) is None:  # built without a C compiler: the source runs
        assert fabric_kind() == "source"
        return
    assert use_source(folder) == bool(os.environ.get(PURE_ENV))
    assert fabric_kind() == ("source" if os.environ.get(PURE_ENV) else "compiled")
