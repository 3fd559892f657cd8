"""Split K (ADR-0712): simulated time and cost-model estimate with split K as the tiler
chooses it, without split K (no split candidates), and with split K taken whenever its
estimate is lower at all (no SPLIT_GAIN margin).

    .venv/bin/python benchmarks/split_k.py              # a 1 × 768 × 3072 int8 GEMM on base
    .venv/bin/python benchmarks/split_k.py --models     # also gpt2-small seq 128 and decode
                                                        # kv 1024 on base (minutes each)

Every case is one `kernbench run --quiet --no-trace` in this process; the variants patch
`kernbench.compiler.tiling` (SPLIT_K, SPLIT_GAIN) and clear the tiler's cache. Simulated
figures are deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kernbench.cli import main as cli  # noqa: E402
from kernbench.compiler import tiling  # noqa: E402
from models import int8_gemm  # noqa: E402

VARIANTS = {"chosen": {}, "no split": {"SPLIT_K": ()}, "no margin": {"SPLIT_GAIN": 1.0}}


def _run(argv: list[str], patch: dict, out: Path) -> dict:
    saved = {k: getattr(tiling, k) for k in patch}
    for k, v in patch.items():
        setattr(tiling, k, v)
    tiling.choose_gemm_tiles.cache_clear()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(["run", *argv, "--quiet", "--no-trace", "--out", str(out)])
    finally:
        for k, v in saved.items():
            setattr(tiling, k, v)
        tiling.choose_gemm_tiles.cache_clear()
    if code != 0:
        raise SystemExit(f"run {argv} failed ({code})")
    return json.loads((out / "stats.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", action="store_true", help="also the gpt2-small cases")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        onnx.save(int8_gemm(1, 768, 3072), d / "g.onnx")
        (d / "q.yaml").write_text('overrides:\n  - {match: "*", activation: 8}\n')
        cases = [("int8 GEMM 1×768×3072", [str(d / "g.onnx"), "-t", "base", "--all-pes",
                                           "--qconfig", str(d / "q.yaml")])]
        if args.models:
            cases += [("gpt2-small seq 128", ["gpt2-small", "--seq-len", "128", "-t", "base"]),
                      ("gpt2-small decode kv 1024", ["gpt2-small", "--seq-len", "1",
                                                     "--kv-len", "1024", "-t", "base"])]
        print("| case | variant | simulated ns | estimate ns |")
        print("| --- | --- | ---: | ---: |")
        for i, (name, argv) in enumerate(cases):
            for variant, patch in VARIANTS.items():
                st = _run(argv, patch, d / f"out{i}-{variant}")
                print(f"| {name} | {variant} | {st['total_ns']:,.1f} | "
                      f"{st.get('estimate_ns', float('nan')):,.1f} |", flush=True)


if __name__ == "__main__":
    main()
