"""A hash of the compiled program of every test model on one topology: the check that a
compiler change leaves programs byte for byte as they were. Run it once per tree and
compare the two listings:

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/compile_hashes.py --topology base > a.txt
    .venv/bin/python benchmarks/compile_hashes.py --topology base > b.txt && diff a.txt b.txt

Models: tests/zoo/*.onnx and tests/models/*.onnx, with the default QConfig or
`--qconfig FILE` (e.g. examples/qconfig/fp16.yaml). Each line: the model,
the first 12 hex digits of the SHA-256 of its cmdq.json and of its memory.json (or the
error a model cannot compile with).
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

from kernbench.errors import InputError
from kernbench.host.flow import CompileRequest, compile_model
from kernbench.topology import load_topology

TESTS = Path(__file__).resolve().parents[1] / "tests"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="base", help="a preset or topology file")
    ap.add_argument("--qconfig", type=Path, help="a QConfig YAML (default: the built-in)")
    args = ap.parse_args()
    req = CompileRequest(qconfig=args.qconfig)
    topo = load_topology(args.topology)
    models = sorted([*(TESTS / "zoo").glob("*.onnx"), *(TESTS / "models").glob("*.onnx")])
    for model in models:
        name = f"{model.parent.name}/{model.stem}"
        with tempfile.TemporaryDirectory() as tmp:
            bundle = Path(tmp) / "bundle"
            try:
                compile_model(model, topo, bundle, req)
            except (InputError, ValueError, RuntimeError) as e:
                print(name, "error:", type(e).__name__, flush=True)
                continue
            print(name, digest(bundle / "cmdq.json"), digest(bundle / "memory.json"),
                  flush=True)


if __name__ == "__main__":
    main()
