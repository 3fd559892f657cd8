"""Same ONNX in -> byte-identical ir.json and weights.npz, whatever PYTHONHASHSEED."""

from __future__ import annotations

import os
import subprocess
import sys

from ir_helpers import model_path


def test_byte_identical(tmp_path):
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / seed / "ir.json"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        code = ("import sys; from kernbench.cli import main; "
                "sys.exit(main(['import', sys.argv[1], '-o', sys.argv[2]]))")  # fmt: skip
        r = subprocess.run([sys.executable, "-c", code, str(model_path("llama")), str(out)],
                           env=env, capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs.append((out.read_bytes(), (out.parent / "weights.npz").read_bytes()))
    assert outs[0] == outs[1]
