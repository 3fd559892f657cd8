"""Two runs side by side (`kernbench compare`): the headline figures of two stats.json
documents and their ratios B / A.

Pure functions of the two stats dicts: every figure is read from stats.json under the key
named in `FIGURES`, so a compared value is the value stats.json holds. A figure one of the
runs lacks (an `llm` figure of a run without the section, the energy per token of a model
without `input_ids`) is null on that side and has no ratio.
"""

from __future__ import annotations

from typing import Any

from kernbench.report.energy import fmt_energy

#: (name in the comparison, stats.json key path, unit). Units: ns, pJ, mW, mm², 1/s, or ""
FIGURES: list[tuple[str, str, str]] = [
    ("total_ns", "total_ns", "ns"),
    ("total_cycles", "total_cycles", "cycles"),
    ("clock_ghz", "clock_ghz", "GHz"),
    ("pes", "", "PEs"),  # counted from the engines (pe_gemm engines)
    ("energy_pj", "energy.total_pj", "pJ"),
    ("average_power_mw", "energy.average_power_mw", "mW"),
    ("energy_per_token_pj", "energy.per_token_pj", "pJ"),
    ("tops_per_w", "energy.tops_per_w", "TOPS/W"),
    ("area_mm2", "area_mm2.total", "mm²"),
    ("roofline_fraction", "roofline_fraction", ""),
    ("bound_by", "model_bound.bound_by", ""),
    ("bottleneck", "bottleneck.component", ""),
    ("bottleneck_utilization", "bottleneck.utilization", ""),
    ("ttft_ns", "llm.ttft_ns", "ns"),
    ("tpot_ns", "llm.tpot_ns", "ns"),
    ("prefill_tokens_per_s", "llm.prefill_tokens_per_s", "1/s"),
    ("decode_tokens_per_s", "llm.decode_tokens_per_s", "1/s"),
]


def _get(stats: dict[str, Any], path: str) -> Any:
    if not path:
        return sum(1 for e in (stats.get("engines") or {}).values()
                   if isinstance(e, dict) and e.get("kind") == "pe_gemm") or None
    cur: Any = stats
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare_stats(a: dict[str, Any], b: dict[str, Any], name_a: str,
                  name_b: str) -> dict[str, Any]:
    """The comparison document (`--json`): both names, and per figure its unit, A's and
    B's values and `ratio` = B / A (null where either is not a number or A is 0). Figures
    that neither run has are left out."""
    rows = []
    for name, path, unit in FIGURES:
        va, vb = _get(a, path), _get(b, path)
        if va is None and vb is None:
            continue
        ratio = (round(vb / va, 6) if _number(va) and _number(vb) and va != 0 else None)
        rows.append({"figure": name, "unit": unit, "a": va, "b": vb, "ratio": ratio})
    return {"a": name_a, "b": name_b, "figures": rows}


def _human(v: Any, unit: str) -> str:
    if v is None:
        return "–"
    if not _number(v):
        return str(v)
    if unit == "ns":
        for scale, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
            if abs(v) >= scale:
                return f"{v / scale:,.3f} {u}"
        return f"{v:,.1f} ns"
    if unit == "pJ":
        return fmt_energy(v)
    if unit == "mW":
        return f"{v / 1e3:,.2f} W" if abs(v) >= 1e3 else f"{v:,.1f} mW"
    if unit in ("cycles", "PEs"):
        return f"{v:,}"
    if unit == "1/s":
        return f"{v:,.1f} /s"
    if unit == "":
        return f"{v:.3f}"
    return f"{v:,.3f} {unit}"


def comparison_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B / A) as text in human units, one per figure of `doc`."""
    out = []
    for r in doc["figures"]:
        ratio = f"{r['ratio']:.3f}×" if r["ratio"] is not None else (
            "same" if r["a"] == r["b"] else "–")
        out.append((r["figure"], _human(r["a"], r["unit"]), _human(r["b"], r["unit"]), ratio))
    return out


def headline(doc: dict[str, Any]) -> str:
    """One line: B against A in time, energy and area (the ratios, B / A)."""
    by = {r["figure"]: r["ratio"] for r in doc["figures"]}
    parts = [f"{label} {by[k]:.3f}×" for k, label in
             (("total_ns", "time"), ("energy_pj", "energy"), ("area_mm2", "area"))
             if by.get(k) is not None]
    return f"{doc['b']} / {doc['a']}: " + (", ".join(parts) if parts else "no common figure")
