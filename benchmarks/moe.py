"""MoE models on one chip: decode step time, routing imbalance and simulation cost.

    .venv/bin/python benchmarks/moe.py            # the table in docs/performance.md
    .venv/bin/python benchmarks/moe.py --quick    # the tiny Mixtral-style case only

Every case is one `kernbench run CONFIG ... --no-trace --no-report` in its own process
(peak RSS from os.wait4, as `llm_scale.py` measures it); every layer is simulated (an MoE
model's layers draw different routings, so no block replay) unless the case names
`--routing-same-layers`. Prints a markdown table on stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from measured_run import measured_run

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "hf_configs"

DECODE = ["-t", "large", "--batch", "8", "--kv-len", "1024"]
W4A8 = ["-q", str(ROOT / "examples" / "qconfig" / "w4a8.yaml")]
CASES = [
    ("tiny Mixtral-style, prefill 64, zipf:1.5",
     [str(CFG / "tiny-mixtral.json"), "-t", "small", "--seq-len", "64", "--routing",
      "zipf:1.5"]),
    ("Moonlight-16B-A3B decode b8 kv1024 (W8A8)", [str(CFG / "moonlight-16b-a3b"), *DECODE]),
    ("Mixtral-8x7B decode b8 kv1024 (W4A8)", [str(CFG / "mixtral-8x7b"), *DECODE, *W4A8]),
    ("Mixtral-8x7B decode b8 kv1024 (W4A8), --routing-same-layers",
     [str(CFG / "mixtral-8x7b"), *DECODE, *W4A8, "--routing-same-layers"]),
]


def run_moe(args: list[str]) -> dict:
    """One `kernbench run` in its own process: wall, CPU, peak RSS and its stats.json."""
    return measured_run([*args, "--no-trace", "--no-report"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the tiny case only")
    a = ap.parse_args()
    cases = CASES[:1] if a.quick else CASES
    print("| case | step | tokens/s | max layer imbalance | total imbalance | CMDQ entries | "
          "CPU s | wall s | peak RSS MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, args in cases:
        r = run_moe(args)
        s = r["stats"]
        llm, moe = s["llm"], s["moe"]
        tps = llm["decode_tokens_per_s"] or llm["prefill_tokens_per_s"]
        print(f"| {name} | {s['total_ns'] / 1e6:.3f} ms | {tps:,.1f} | "
              f"{moe['max_layer_imbalance']:.2f} | {moe['total']['imbalance']:.3f} | "
              f"{s.get('entry_count', len(s.get('entries', {}))):,} | {r['cpu_s']:.1f} | "
              f"{r['wall_s']:.1f} | {r['rss_mb']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
