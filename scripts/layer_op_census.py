"""Whole-layer-op census of the model zoo: compile every tests/zoo model (or the ones
named) for a topology and print how many CMDQ entries are TE_LAYER_OP / VE_LAYER_OP, and
which layers they come from (`kernbench.report.layer_ops`).

    .venv/bin/python scripts/layer_op_census.py [--topology small] [--layers] [model ...]

Compile only (no simulation): a few seconds per model. The numbers are deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernbench.cli import main as cli_main  # noqa: E402
from kernbench.report.layer_ops import LayerOpCensus, layer_op_census_of_bundle  # noqa: E402

ZOO = ROOT / "tests" / "zoo"


def census(model: str, topology: str, tmp: Path) -> LayerOpCensus | None:
    """The census of one zoo model compiled for `topology`; None if it does not compile."""
    out = tmp / f"{model}-{topology}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli_main(["compile", str(ZOO / f"{model}.onnx"), "--topology", topology,
                         "--out", str(out)])
    return layer_op_census_of_bundle(out) if code == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="default: every model in tests/zoo")
    ap.add_argument("--topology", default="small")
    ap.add_argument("--layers", action="store_true", help="also list the whole layers")
    args = ap.parse_args()
    models = args.models or sorted(p.stem for p in ZOO.glob("*.onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            c = census(m, args.topology, Path(tmp))
            print(f"{m:18s} " + ("does not compile" if c is None else c.line()))
            if c is not None and args.layers:
                for layer, oc in c.layers.items():
                    print(f"    {oc} {layer}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
