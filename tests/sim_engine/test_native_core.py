"""The compiled reservation servers (setup.py builds `components/fabric.py` with mypyc
where it can) give the same timing outputs as their source, and the source runs when it
is asked for or newer than the build."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from kernbench.components.native import PURE_ENV, compiled_file, use_source

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


def test_a_build_older_than_its_source_is_not_run(tmp_path):
    (tmp_path / "fabric.py").write_text("")
    assert not use_source(tmp_path, pure=False)  # no extension: Python imports the source
    ext = tmp_path / f"fabric{EXTENSION_SUFFIXES[0]}"
    ext.write_bytes(b"")
    now = time.time()
    os.utime(tmp_path / "fabric.py", (now - 10, now - 10))
    os.utime(ext, (now, now))
    assert compiled_file(tmp_path) == ext
    assert not use_source(tmp_path, pure=False)  # a fresh build runs
    assert use_source(tmp_path, pure=True)       # unless the source is asked for
    os.utime(tmp_path / "fabric.py", (now + 10, now + 10))
    assert use_source(tmp_path, pure=False)      # the source edited since the build
