"""Parse tt-metal's tech_reports/GEMM_FLOPS/GEMM_FLOPS.md into benchmarks/data/tt_gemm_flops.csv.

Run:  .venv/bin/python scripts/tt_gemm_flops.py PATH/TO/GEMM_FLOPS.md [--out CSV]

Input: the markdown file of the public repository `tenstorrent/tt-metal` (the rows kept in
this repository were parsed from commit SOURCE_COMMIT). It holds six tables, each under a
`<summary>` line naming the card, whether the configuration is "Out of Box" or "Manually
Tuned", and for P150 the grid. Every table row becomes one CSV row with the snake_case
columns of COLUMNS. Out-of-box tables have no sharding columns: their tensors are
interleaved in DRAM, which is not sharded, so `in0_sharded` and `out_sharded` are False.

Each row is checked against the table's own TFLOPs column (2·M·K·N / time): a row whose
time does not reproduce its TFLOPs to the table's rounding is an error (exit 2), so a
mis-copied or mis-parsed time cannot pass silently. The row count must be 702.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

SOURCE_REPO = "tenstorrent/tt-metal"
SOURCE_PATH = "tech_reports/GEMM_FLOPS/GEMM_FLOPS.md"
SOURCE_COMMIT = "06bd3735f7df2921d8195d732c14eba433e4a32d"
EXPECTED_ROWS = 702

COLUMNS = ["card", "config", "m", "k", "n", "use_trace", "grid_size", "in0_sharded",
           "out_sharded", "in0_storage_type", "in1_storage_type", "out_storage_type",
           "dtype", "math_fidelity", "inference_time_avg_ns"]

# Source header (lower-cased, spaces to underscores) -> CSV column.
HEADER_MAP = {"m": "m", "k": "k", "n": "n", "use_trace": "use_trace",
              "grid_size": "grid_size", "in0_sharded": "in0_sharded",
              "out_sharded": "out_sharded", "in0_storage_type": "in0_storage_type",
              "in1_storage_type": "in1_storage_type", "out_storage_type": "out_storage_type",
              "dtype": "dtype", "math_fidelity": "math_fidelity",
              "inference_time_avg_[ns]": "inference_time_avg_ns", "tflops_(avg)": "tflops"}

SUMMARY = re.compile(r"<summary><strong>(N150|P150) (Out of Box|Manually Tuned)")


class ParseError(Exception):
    """A line of the source that does not fit the expected table layout."""


def _norm_header(cell: str) -> str:
    return re.sub(r"\s+", "_", cell.strip().lower())


def _value(col: str, cell: str) -> str:
    cell = cell.strip()
    if col == "dtype":
        return cell.removeprefix("DataType.")
    if col == "math_fidelity":
        return cell.removeprefix("MathFidelity.")
    if col == "grid_size":
        x, y = re.fullmatch(r"\((\d+),\s*(\d+)\)", cell).groups()
        return f"{x}x{y}"
    return cell


def parse(text: str) -> list[dict]:
    """All table rows of the markdown `text` as CSV dicts (COLUMNS order)."""
    rows: list[dict] = []
    card = config = None
    header: list[str] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = SUMMARY.search(line)
        if m:
            card = m.group(1)
            config = "out_of_box" if m.group(2) == "Out of Box" else "hand_tuned"
            header = None
            continue
        if not line.startswith("|") or card is None:
            continue
        cells = [c for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [_norm_header(c) for c in cells]
            continue
        if set(cells[0].strip()) <= {"-"}:
            continue
        if len(cells) != len(header):
            raise ParseError(f"line {lineno}: {len(cells)} cells, header has {len(header)}")
        raw = dict(zip(header, cells, strict=True))
        row = {"card": card, "config": config, "in0_sharded": "False", "out_sharded": "False"}
        for src, col in HEADER_MAP.items():
            if src in raw:
                row[col] = _value(col, raw[src])
        missing = [c for c in COLUMNS if c not in row]
        if missing:
            raise ParseError(f"line {lineno}: no column {missing[0]}")
        _check_tflops(lineno, row)
        rows.append({c: row[c] for c in COLUMNS})
    return rows


def _check_tflops(lineno: int, row: dict) -> None:
    m, k, n = int(row["m"]), int(row["k"]), int(row["n"])
    ns = float(row["inference_time_avg_ns"])
    tflops = 2.0 * m * k * n / ns / 1e3
    if abs(tflops - float(row["tflops"])) > 0.006 + 1e-4 * tflops:
        raise ParseError(f"line {lineno}: time {ns} ns gives {tflops:.3f} TFLOPs, "
                         f"table says {row['tflops']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="GEMM_FLOPS.md of tt-metal")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/data/tt_gemm_flops.csv"))
    args = ap.parse_args(argv)
    try:
        rows = parse(args.source.read_text(encoding="utf-8"))
    except (OSError, ParseError) as e:
        print(f"{args.source}: {e}", file=sys.stderr)
        return 2
    if len(rows) != EXPECTED_ROWS:
        print(f"{args.source}: {len(rows)} rows, expected {EXPECTED_ROWS}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        f.write(f"# source: {SOURCE_REPO} {SOURCE_PATH} @ {SOURCE_COMMIT}\n")
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(args.out)
    print(f"{len(rows)} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
