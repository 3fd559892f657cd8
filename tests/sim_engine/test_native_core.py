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

from kernbench.components.native import PURE_ENV, compiled_file, use_source

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
# a run with contended links, HBM channels and command packets on a many-cube topology
_RUN = ("import sys; from kernbench.cli import main; from kernbench.components.native "
        "import fabric_kind; print(fabric_kind()); sys.exit(main(['run', sys.argv[1], "
        "'-t', 'large', '--no-report', '--quiet', '--trace', '--out', sys.argv[2]]))")


def _run(out: Path, pure: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    if pure:
        env[PURE_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", _RUN, str(GPT2), str(out)], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


def test_compiled_and_source_servers_give_identical_outputs(tmp_path):
    kinds = {_run(tmp_path / "a", pure=False), _run(tmp_path / "b", pure=True)}
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
