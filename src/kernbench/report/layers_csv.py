"""layers.csv: one row per layer of a compiled run, for spreadsheets and SCALE-Sim-style
scripts (columns and units in docs/stats.md, "layers.csv").

Every value is read from stats.json's `layers` section (and `clock_ghz` for cycles), so the
CSV and stats.json never disagree; the rows are in stats.json's (sorted) layer-id order.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

#: the columns, in order (units: ns, cycles of `clock_ghz`, bytes, pJ)
COLUMNS: list[str] = [
    "layer", "op_type", "ns", "cycles", "busy_ns", "macs",
    "hbm_bytes", "shared_sram_bytes", "tcm_bytes", "compulsory_hbm_bytes",
    "compute_bound_ns", "memory_bound_ns", "bound_ns", "bound_by", "roofline_fraction",
    "energy_pj", "bottleneck",
]


def layer_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of layers.csv (column → value) of a run's stats; [] without `layers`."""
    clock = float(stats.get("clock_ghz") or 0.0)
    rows = []
    for lid in sorted(stats.get("layers") or {}):
        v = stats["layers"][lid]
        moved = v.get("traffic_bytes") or {}
        rows.append({
            "layer": lid, "op_type": v["op_type"], "ns": v["ns"],
            "cycles": round(v["ns"] * clock), "busy_ns": v.get("busy_ns", ""),
            "macs": v["macs"],
            "hbm_bytes": moved.get("hbm", ""), "shared_sram_bytes": moved.get("shared_sram", ""),
            "tcm_bytes": moved.get("tcm", ""), "compulsory_hbm_bytes": v["bytes"],
            "compute_bound_ns": v["compute_bound_ns"], "memory_bound_ns": v["memory_bound_ns"],
            "bound_ns": v["bound_ns"], "bound_by": v["bound_by"],
            "roofline_fraction": v["roofline_fraction"], "energy_pj": v.get("energy_pj", ""),
            "bottleneck": v.get("bottleneck") or "",
        })
    return rows


def layers_csv_text(stats: dict[str, Any]) -> str:
    """layers.csv's text: a header and one row per layer (`\\n` line ends)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(layer_rows(stats))
    return buf.getvalue()


def write_layers_csv(stats: dict[str, Any], path: Path) -> list[Path]:
    """Write layers.csv when the run has layers (a compiled bundle): [path], else [].
    Written through a temporary file renamed over the target (never half-written)."""
    if not stats.get("layers"):
        return []
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(layers_csv_text(stats), encoding="utf-8")
    tmp.replace(path)
    return [path]
