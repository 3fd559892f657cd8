"""Expert-parallel MoE runs (`kernbench run --ep`, ADR-1050) for benchmarks/multichip.py
`--ep CASE ...` (or `--ep all`; `--ep show` only rewrites the table): each case one `kernbench run` in a process of its own
(measured: wall, CPU, peak RSS), kept in benchmarks/data/multichip_ep.json, the table of
every kept result written to docs/performance.md ("Expert parallelism").
"""

from __future__ import annotations

import sys
from pathlib import Path

import results_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "data" / "multichip_ep.json"
W4A8 = "examples/qconfig/w4a8.yaml"
#: Mixtral-8x7B (tests/hf_configs/mixtral-8x7b) with 8 of its 32 decoder layers, and the
#: whole model; every layer simulated (`--exact`)
MIXTRAL8 = "benchmarks/data/mixtral-8x7b-8l"
MIXTRAL = "tests/hf_configs/mixtral-8x7b"
_DECODE = ["--batch", "8", "--kv-len", "1024", "-q", W4A8, "--exact", "--no-report",
           "--no-trace"]
#: name → kernbench run arguments; the one-chip case is the same step on `large`, the
#: chip `large-x8` is made of. Routing uniform (seed 0) unless named, a draw per layer.
CASES: dict[str, list[str]] = {
    "mixtral-8x7b (8 layers) large-x8 ep8 decode b8 kv1024": [
        MIXTRAL8, "-t", "large-x8", "--ep", "8", *_DECODE],
    "mixtral-8x7b (8 layers) large, one chip, decode b8 kv1024": [
        MIXTRAL8, "-t", "large", *_DECODE],
    "mixtral-8x7b (8 layers) large-x8 ep8 decode b8 kv1024 zipf:1.5": [
        MIXTRAL8, "-t", "large-x8", "--ep", "8", *_DECODE, "--routing", "zipf:1.5"],
    "mixtral-8x7b (32 layers) large-x8 ep8 decode b8 kv1024": [
        MIXTRAL, "-t", "large-x8", "--ep", "8", *_DECODE],
}


def run_case(name: str) -> dict:
    from measured_run import measured_run

    m = measured_run(CASES[name])
    st = m["stats"]
    moe, par = st.get("moe") or {}, st.get("parallel") or {}
    layer0 = (moe.get("layers") or [{}])[0]
    return {"args": CASES[name], "wall_s": round(m["wall_s"], 1), "cpu_s": round(m["cpu_s"], 1),
            "rss_mb": round(m["rss_mb"]), "total_ns": st["total_ns"],
            "entries": st.get("entry_count"), "ep": par.get("ep", 1),
            "collective_entries": par.get("collective_entries", 0),
            "expert_imbalance": layer0.get("imbalance"),
            "chip_imbalance": layer0.get("chip_imbalance"),
            "per_chip": layer0.get("per_chip"),
            "a2a_bytes": (moe.get("all_to_all") or {}).get("cross_chip_bytes"),
            "chip_link_pj": (st.get("energy", {}).get("by_component_kind") or {}).get("chip_link")}


def section(results: dict) -> list[str]:
    rows = ["## Expert parallelism (`benchmarks/multichip.py --ep`)", "",
            "<!-- multichip-ep:begin -->",
            "Command: `.venv/bin/python benchmarks/multichip.py --ep all` (each case in a "
            "process of its own; `--ep NAME` reruns one). `kernbench run --ep 8` (ADR-1050): "
            "Mixtral-8x7B's shapes, with 8 of its 32 layers (benchmarks/data/mixtral-8x7b-8l) "
            "and whole, every layer simulated (`--exact`), W4A8, decode batch 8 (one sequence per chip "
            "under EP=8), KV 1024; the one-chip case is the same step on `large`, the chip "
            "`large-x8` is made of. Wall time on a shared machine; CPU seconds are the "
            "comparable figure.", "",
            "| case | step (ms) | tokens/s | layer-0 expert imbalance | layer-0 rows per chip "
            "(chip imbalance) | all-to-all bytes between chips | wall s | CPU s | peak RSS MB | "
            "CMDQ entries (collectives) |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in CASES:
        r = results.get(name)
        if r is None:
            rows.append(f"| {name} | not run | – | – | – | – | – | – | – | – |")
            continue
        ms = r["total_ns"] / 1e6
        chips = (f"{r['per_chip']} ({r['chip_imbalance']:.2f})" if r.get("per_chip")
                 else "one chip")
        a2a = f"{r['a2a_bytes']:,}" if r.get("a2a_bytes") is not None else "–"
        imb = f"{r['expert_imbalance']:.2f}" if r.get("expert_imbalance") is not None else "–"
        rows.append(f"| {name} | {ms:.3f} | {8e3 / ms:,.1f} | {imb} | {chips} | {a2a} | "
                    f"{r['wall_s']} | {r['cpu_s']} | {r['rss_mb']} | {r['entries']:,} "
                    f"({r['collective_entries']:,}) |")
    rows += ["", "Arguments of each case: `CASES` in benchmarks/multichip_ep.py.",
             "<!-- multichip-ep:end -->"]
    return rows


def main_ep(names: list[str], doc: bool) -> int:
    results = results_file.load(RESULTS)
    for name in ([] if names == ["show"] else list(CASES) if names == ["all"] else names):
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}; cases: {', '.join(CASES)}")
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results = results_file.record(RESULTS, name, run_case(name))
    lines = section(results)
    text = "\n".join(lines)
    print(text)
    if doc:
        from doc_section import replace_section

        replace_section(ROOT / "docs" / "performance.md", lines[0],
                        "<!-- multichip-ep:begin -->", "<!-- multichip-ep:end -->", text)
    return 0
