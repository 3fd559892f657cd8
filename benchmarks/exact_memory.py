"""Host memory of `kernbench run --exact` against the number of layers (issue 15, ADR-0713):
peak RSS of one run per layer count, each in its own process (os.wait4).

    .venv/bin/python benchmarks/exact_memory.py              # 2, 4, 8, 16 layers
    .venv/bin/python benchmarks/exact_memory.py --layers 2 4 --seq-len 256

The model is tests/hf_configs/tiny-llama-4l.json widened to hidden 512, 8 heads, FFN 1024,
vocab 1024, with L layers; prefill on `base`, `--exact --no-trace --no-report` (the run
compiles layer by layer while it simulates). `--keep-bundle` also writes cmdq.json, which
compiles the whole program first: the comparison the table in docs/performance.md shows.
Prints a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_scale import run_case  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "tests" / "hf_configs" / "tiny-llama-4l.json"


def config(layers: int, folder: Path) -> Path:
    cfg = json.loads(BASE.read_text())
    cfg.update(num_hidden_layers=layers, hidden_size=512, num_attention_heads=8,
               num_key_value_heads=8, intermediate_size=1024, vocab_size=1024)
    path = folder / f"L{layers}.json"
    path.write_text(json.dumps(cfg))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--whole", action="store_true",
                    help="also each run with --keep-bundle (the program compiled whole)")
    a = ap.parse_args()
    print("| layers | CMDQ entries | simulated step | layer by layer: peak RSS MB | CPU s |"
          + (" compiled whole (--keep-bundle): peak RSS MB | CPU s |" if a.whole else ""))
    print("| ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if a.whole else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.layers:
            args = [str(config(n, Path(tmp))), "-t", "base", "--seq-len", str(a.seq_len),
                    "--exact"]
            r = run_case(args)
            row = (f"| {n} | {r['entries']:,} | {r['total_ms']:.3f} ms | {r['rss_mb']:,.0f} | "
                   f"{r['cpu_s']:.1f} |")
            if a.whole:
                w = run_case(args + ["--keep-bundle"])
                row += f" {w['rss_mb']:,.0f} | {w['cpu_s']:.1f} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
