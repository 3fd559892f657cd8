"""Simulation speed on real-size LLMs: wall time, CPU time, peak RSS and simulated CMDQ
entries per second, per model size, with and without replay of identical blocks.

    .venv/bin/python benchmarks/llm_scale.py            # the table in docs/performance.md
    .venv/bin/python benchmarks/llm_scale.py --quick    # the tiny case only
    .venv/bin/python benchmarks/llm_scale.py --with-exact   # also Llama-3-8B prefill --exact

Every case is one `kernbench run ... --no-trace --no-report` in its own process (so that
peak RSS is that run's, from os.wait4); prints a markdown table on stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from measured_run import measured_run

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "hf_configs"

CASES = [
    ("tiny llama, 4 layers, prefill 128", [str(CFG / "tiny-llama-4l.json"), "-t", "small",
                                           "--seq-len", "128"]),
    ("Llama-3-8B prefill 2048", [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048"]),
    ("Qwen2-7B decode b8 kv8192", [str(CFG / "qwen2-7b"), "-t", "large", "--batch", "8",
                                   "--kv-len", "8192"]),
    ("Qwen2-7B decode b8 kv8192 --exact", [str(CFG / "qwen2-7b"), "-t", "large", "--batch",
                                           "8", "--kv-len", "8192", "--exact"]),
]
# on the stock preset: HBM reuse by liveness fits the whole prefill in 24 GiB per cube, and
# the run simulates the program from memory (its cmdq.json would be over the CMDQ file limit)
EXACT_8B = ("Llama-3-8B prefill 2048 --exact",
            [str(CFG / "llama-3-8b"), "-t", "large", "--seq-len", "2048", "--exact"])


def run_case(args: list[str]) -> dict:
    r = measured_run([*args, "--no-trace", "--no-report"])
    stats, wall = r["stats"], r["wall_s"]
    cpu = r["cpu_s"]
    entries = stats.get("entry_count", len(stats.get("entries", {})))
    llm = stats.get("llm", {})
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": r["rss_mb"], "entries": entries,
            "entries_per_cpu_s": entries / cpu if cpu else 0.0,
            "total_ms": stats["total_ns"] / 1e6, "layers": llm.get("layers"),
            "replay": stats.get("replay", {}).get("simulated_blocks")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the tiny case only")
    ap.add_argument("--with-exact", action="store_true", help="also Llama-3-8B --exact")
    ap.add_argument("--only-exact-8b", action="store_true", help="only Llama-3-8B --exact")
    a = ap.parse_args()
    cases = CASES[:1] if a.quick else CASES + ([EXACT_8B] if a.with_exact else [])
    if a.only_exact_8b:
        cases = [EXACT_8B]
    print("| case | layers simulated / total | simulated step | CMDQ entries simulated | "
          "entries / CPU s | CPU s | wall s | peak RSS MB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, args in cases:
        r = run_case(args)
        sim = r["replay"] or r["layers"]
        print(f"| {name} | {sim} / {r['layers']} | {r['total_ms']:.3f} ms | {r['entries']:,} | "
              f"{r['entries_per_cpu_s']:,.0f} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
              f"{r['rss_mb']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
