"""The gpt2-small decode step (1024-token KV cache, `base`) as the code is now, and with
one decision undone at a time: each of ADR-0721's, ADR-0726's owner-heavy key ranges,
ADR-0727's fused attention steps, ADR-0729's balanced split-K parts, ADR-0731's
weight chunks and ADR-0733's row reduction. (The "A → B" figures of those ADRs were measured at their own commits,
before later changes; docs/performance.md has this table for the code as it is.)

    .venv/bin/python benchmarks/decode_ablation.py          # every row (about 8 minutes)
    .venv/bin/python benchmarks/decode_ablation.py --only "chunk 8 KiB"

Each row sets module constants of the compiler for one in-process `kernbench run
--no-trace --quiet --json` and restores them. The simulated time is deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernbench.cli import main as cli_main  # noqa: E402
from kernbench.compiler import kv_blocks  # noqa: E402
from kernbench.compiler.lower import (  # noqa: E402
    fuse_vector,
    gemm_balance,
    gemm_cubes,
    gemm_rowreduce,
    kv_rows,
    kv_update,
    te_weights,
)

#: the flash-attention steps ADR-0727 lets a fused chain take
_FLASH_STEPS = {"VE_SOFTMAX_BLOCK_TILE", "VE_ROWSCALE_TILE", "VE_ATTN_COMBINE_TILE"}

#: row name → {(module, constant): value}; the first row is the compiler as it is
ROWS: dict[str, dict[tuple[object, str], object]] = {
    "as built": {},
    "new rows by the KV_UPDATE (kv_rows.MAX_ROWS = 0)": {(kv_rows, "MAX_ROWS"): 0},
    "chunk 8 KiB": {(kv_update, "CHUNK_BYTES"): 8192},
    "chunk 32 KiB": {(kv_update, "CHUNK_BYTES"): 32768},
    "whole past-copy blocks (chunk 1 MiB)": {(kv_update, "CHUNK_BYTES"): 1 << 20},
    "remote start 1000 cycles": {(gemm_cubes, "REMOTE_START_CYCLES"): 1000},
    "equal key ranges (kv_blocks.OWNER_EXTRA_FOLDS = 0, before ADR-0726)":
        {(kv_blocks, "OWNER_EXTRA_FOLDS"): 0},
    "attention steps not fused (fuse_vector.STEPS without them, before ADR-0727)":
        {(fuse_vector, "STEPS"): fuse_vector.STEPS - _FLASH_STEPS},
    "equal split-K parts (gemm_balance.BALANCE = False, before ADR-0729)":
        {(gemm_balance, "BALANCE"): False},
    "whole weight tiles (te_weights.WEIGHT_CHUNK_BYTES = 1 GiB, before ADR-0731)":
        {(te_weights, "WEIGHT_CHUNK_BYTES"): 1 << 30},
    "owner per tile, norm on its own (gemm_rowreduce.ROW_REDUCE = False, before ADR-0733)":
        {(gemm_rowreduce, "ROW_REDUCE"): False},
}
ARGS = ["gpt2-small", "--seq-len", "1", "--kv-len", "1024", "-t", "base"]


def run(settings: dict[tuple[object, str], object]) -> dict:
    """stats of one decode run with `settings` applied (restored afterwards)."""
    old = {key: getattr(*key) for key in settings}
    try:
        for (mod, name), value in settings.items():
            setattr(mod, name, value)
        with tempfile.TemporaryDirectory() as tmp:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                code = cli_main(["run", *ARGS, "--no-trace", "--quiet", "--json",
                                 "--out", str(Path(tmp) / "o")])
            if code != 0:
                raise SystemExit(f"kernbench run failed with exit code {code}")
            return json.loads(buf.getvalue())
    finally:
        for (mod, name), value in old.items():
            setattr(mod, name, value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="substrings of row names to keep")
    args = ap.parse_args(argv)
    print("| variant | simulated µs | roofline fraction |\n| --- | ---: | ---: |")
    for name, settings in ROWS.items():
        if args.only and not any(s in name for s in args.only):
            continue
        stats = run(settings)
        print(f"| {name} | {stats['total_ns'] / 1000:.1f} | {stats['roofline_fraction']:.3f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
