"""DIR/results.csv: one row per point, in the spec's point order.

The table is a pure function of the points and of DIR/points/ (never of which executor
ran them or in what order they finished), so a pool, Ray and a resumed sweep write the
same bytes. Numbers are written as Python's shortest round-trip repr; empty cells mean
"does not apply" (tokens/s of a model file, energy per token of a model without tokens).
Every column carries its unit in its name (`_ns`, `_pj`, `_mw`, `_mm2`, `_kib`, `_gbs`).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernbench.host.sweep.points import Point, canonical
from kernbench.host.sweep.runner import point_dir, write_atomic

SHAPE_COLUMNS = ["model", "qconfig", "seq_len", "kv_len", "batch"]
COST_COLUMNS = ["pes", "array_rows", "array_cols", "macs", "tcm_kib", "hbm_gbs"]
#: a load sweep's columns (only when the spec has `serve`)
SERVE_COLUMNS = ["policy", "rate", "requests_per_s", "output_tokens_per_s", "ttft_p50_s",
                 "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "goodput_per_s",
                 "preemptions"]
RESULT_COLUMNS = ["total_ns", "roofline_fraction", "bound_by", "tokens_per_s", "energy_pj",
                  "energy_per_token_pj", "average_power_mw", "area_mm2", "status", "error"]


@dataclass(frozen=True)
class Table:
    """The sweep's table: column names, one row (column → value) per point, and which
    columns are swept parameters (the report plots one sensitivity chart per such)."""

    columns: list[str]
    rows: list[dict[str, Any]]
    swept: list[str]


def read_result(out: Path, point: Point) -> tuple[str, str | None, dict[str, Any] | None]:
    """(status, error, stats) of a point from DIR/points/ID; status "pending" if absent."""
    d = point_dir(out, point.id)
    try:
        return "ok", None, json.loads((d / "stats.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        pass
    except ValueError as e:  # a stats.json written by someone else, unreadable
        return "error", f"unreadable stats.json: {e}", None
    try:
        err = json.loads((d / "error.json").read_text(encoding="utf-8"))
        return "error", str(err.get("error", "")), None
    except FileNotFoundError:
        return "pending", None, None
    except ValueError as e:
        return "error", f"unreadable error.json: {e}", None


def _metrics(point: Point, stats: dict[str, Any]) -> dict[str, Any]:
    total = stats.get("total_ns")
    tokens = (point.seq_len * point.batch if point.seq_len is not None
              and point.batch is not None else None)
    energy = stats.get("energy") if isinstance(stats.get("energy"), dict) else {}
    area = stats.get("area_mm2") if isinstance(stats.get("area_mm2"), dict) else {}
    return {
        "total_ns": total,
        "roofline_fraction": stats.get("roofline_fraction"),
        "bound_by": (stats.get("model_bound") or {}).get("bound_by"),
        "tokens_per_s": round(tokens * 1e9 / total, 3) if tokens and total else None,
        "energy_pj": energy.get("total_pj"),
        "energy_per_token_pj": energy.get("per_token_pj"),
        "average_power_mw": energy.get("average_power_mw"),
        "area_mm2": area.get("total"),
    }


def _serve_metrics(point: Point, stats: dict[str, Any]) -> dict[str, Any]:
    r = stats.get("serve", {}).get("results", {})
    th = r.get("throughput", {})
    return {"requests_per_s": th.get("requests_per_s"),
            "output_tokens_per_s": th.get("output_tokens_per_s"),
            "ttft_p50_s": r.get("ttft_s", {}).get("p50"),
            "ttft_p99_s": r.get("ttft_s", {}).get("p99"),
            "tpot_p50_s": r.get("tpot_s", {}).get("p50"),
            "tpot_p99_s": r.get("tpot_s", {}).get("p99"),
            "e2e_p99_s": r.get("e2e_s", {}).get("p99"),
            "goodput_per_s": r.get("goodput", {}).get("requests_per_s"),
            "preemptions": r.get("preemptions")}


def build_table(points: list[Point], out: Path, grid_keys: list[str],
                swept: list[str]) -> Table:
    """Rows for every point (finished or not) from what DIR/points holds."""
    serving = [c for c in SERVE_COLUMNS if any(p.serve is not None for p in points)]
    columns = ["point", "id", *SHAPE_COLUMNS, *grid_keys, *COST_COLUMNS, *serving,
               *RESULT_COLUMNS]
    rows = []
    for p in points:
        status, error, stats = read_result(out, p)
        row: dict[str, Any] = {"point": p.index, "id": p.id, "model": p.model,
                               "qconfig": p.qconfig_label, "seq_len": p.seq_len,
                               "kv_len": p.kv_len, "batch": p.batch}
        row.update(dict(p.params))
        if p.serve is not None:
            row.update(policy=p.serve["policy"], rate=p.serve["rate"])
        if p.cost is not None:
            row.update({c: getattr(p.cost, c) for c in COST_COLUMNS})
        if stats is not None:
            row.update(_serve_metrics(p, stats) if p.serve is not None else _metrics(p, stats))
        row["status"], row["error"] = status, error
        rows.append(row)
    return Table(columns, rows, swept)


def cell(v: object) -> str:
    """One CSV cell: '' for None, repr for numbers, canonical JSON for lists/mappings."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return v
    return canonical(v)


def csv_text(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.columns)
    for row in table.rows:
        w.writerow([cell(row.get(c)) for c in table.columns])
    return buf.getvalue()


def write_csv(table: Table, path: Path) -> Path:
    write_atomic(Path(path), csv_text(table))
    return Path(path)
