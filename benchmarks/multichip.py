"""All-reduce on `t3k` against tt-metal's published fit, 1 KiB to 64 MiB per chip; and
tensor-parallel LLM runs (`--llm`) against tt-metal's published T3K figures.

Run: `.venv/bin/python benchmarks/multichip.py` (about two minutes; `--max-bytes` to stop
earlier). `--llm CASE ...` (or `--llm all`) runs the LLM cases of `LLM_CASES` one by one
in a process of their own (measured: wall, CPU, peak RSS), keeps each result in
benchmarks/data/multichip_llm.json (a case that takes an hour is run once) and writes the
table of every kept result to docs/performance.md ("LLMs over many chips"). Each size is a bf16 ring all-reduce over the 8 chips in ring order (a cycle
through the 2 × 4 mesh), bidirectional, one chip link per neighbour pair (tt-metal's op
used one: its busbw / linkbw = 2 on the ring), lowered by
`kernbench.compiler.collectives` and simulated (timing only). Every value is the `t3k`
preset's (docs/topologies.md) and the lowering's defaults; one of them is fitted, on other
rows than these: the ring flow control per packet, `system.link.ring_flow_control_ns`,
fitted on tt-metal's ring all_gather and reduce_scatter rows by
`benchmarks/ring_flow_fit.py`, so the all-reduce rows here are predictions.

Reference (public repository `tenstorrent/tt-metal`,
`tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md`, "all_reduce", ring):
kernel_time ≈ 9.07 us + 5.25 us · N/2 + 2(N−1)/N · input_bytes / 18.4 GB/s, with
input_bytes each device's input; and the measured times of the same table (n = 8,
ring dram). The table is written to docs/performance.md (section "Collectives on t3k").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the published fit's terms (SUMMARY_wormhole_b0_bfloat16_6144.md, all_reduce, ring)
FIT_START_US = 9.07
FIT_PER_HOP_US = 5.25
FIT_BUSBW_GBS = 18.4

#: measured kernel times (µs) of the same table, n = 8, ring dram, by input bytes
MEASURED_US = {16384: 35.80, 32768: 38.82, 65536: 44.73, 131072: 55.75, 262144: 81.13,
               524288: 151.45, 1048576: 150.71, 2097152: 249.38, 4194304: 443.11,
               8388608: 820.94, 16777216: 1617.50, 33554432: 3233.07, 67108864: 6454.59}

#: the sizes the 15 % target applies to (the issue: from 64 KiB up)
TARGET_FROM_BYTES = 65536
TARGET_REL = 0.15


def fit_us(nbytes: int, n: int = 8) -> float:
    """tt-metal's fitted 8-chip ring all-reduce time (µs) for `nbytes` per device."""
    return FIT_START_US + FIT_PER_HOP_US * n / 2 + 2 * (n - 1) / n * nbytes / (FIT_BUSBW_GBS * 1e3)


def compare(rows: list[tuple[int, float]], n: int = 8) -> dict:
    """Simulated (bytes, µs) rows against the fit: per-row relative error (sim / fit − 1)
    and the largest |error| over the target sizes (≥ TARGET_FROM_BYTES)."""
    errs = {b: t / fit_us(b, n) - 1 for b, t in rows}
    target = [abs(e) for b, e in errs.items() if b >= TARGET_FROM_BYTES]
    return {"errors": errs, "max_target_error": max(target) if target else None,
            "within": bool(target) and max(target) <= TARGET_REL}


def simulate_all_reduce(nbytes: int, algorithm: str = "ring") -> tuple[float, int]:
    """(simulated µs, CMDQ entries) of a bf16 all-reduce of `nbytes` per chip on t3k."""
    return simulate_collective("all_reduce", nbytes, algorithm)


def simulate_collective(op: str, nbytes: int, algorithm: str = "ring",
                        overrides: tuple[str, ...] = ()) -> tuple[float, int]:
    """(simulated µs, CMDQ entries) of a bf16 collective `op` on the 8 chips of t3k (with
    `--set` `overrides`); `nbytes` is tt-metal's size: each chip's input (all_gather: the
    gathered output)."""
    from kernbench.cmdq.hw import limits_for
    from kernbench.cmdq.io import parse_program
    from kernbench.compiler.collectives import Collective, lower_collective
    from kernbench.host.simulate import simulate_program
    from kernbench.topology import load_topology
    from kernbench.topology.chips import ring_order

    topo = load_topology("t3k", list(overrides))
    chips = tuple(ring_order(topo.config.system)) if algorithm == "ring" else tuple(range(8))
    c = Collective(op, nbytes // 2, chips, algorithm, "bf16",
                   grid=topo.config.system.grid if algorithm == "2d" else None)
    prog = lower_collective(c, topo, limits_for(topo))
    run = simulate_program(parse_program(prog.doc), topo, trace=False, per_entry=False)
    return run.total_ns / 1e3, len(prog.doc["cmdq"])


def _flow_control_ns() -> float:
    """The `t3k` preset's ring flow control per packet (ns)."""
    from kernbench.config import load_topology_config

    return load_topology_config("t3k").system.link.ring_flow_control_ns


def busbw_gbs(nbytes: int, us: float, n: int = 8) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: 2(N−1)/N · bytes over the time."""
    return 2 * (n - 1) / n * nbytes / (us * 1e3)


def _table(rows: list[tuple[int, float, int]]) -> list[str]:
    cmp = compare([(b, t) for b, t, _ in rows])
    out = ["| bytes per chip | simulated (µs) | published fit (µs) | sim / fit − 1 | "
           "measured (µs) | sim / measured − 1 | busbw sim / measured (GB/s) | CMDQ entries |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for b, t, n in rows:
        m = MEASURED_US.get(b)
        mcol = f"{m:.2f} | {t / m - 1:+.1%}" if m else "– | –"
        bw = f"{busbw_gbs(b, t):.2f} / " + (f"{busbw_gbs(b, m):.2f}" if m else "–")
        out.append(f"| {b} | {t:.2f} | {fit_us(b):.2f} | {cmp['errors'][b]:+.1%} | {mcol} | "
                   f"{bw} | {n} |")
    return out


TT_FORMATS = "benchmarks/data/llama31_8b_tt_formats.yaml"
#: name → (kernbench run arguments, the published figure it is compared with). The
#: published figures: tt-metal models/tt_transformers/PERF.md, T3K rows (Llama-3.1-8B
#: 64.3 tokens/s/user; Llama-3.1-70B 16.6 tokens/s/user, TTFT 164 ms; weights bfp8
#: attention / bfp4 MLP, as TT_FORMATS states); the large-x8 case has limits instead
#: (issue 41: ≤ 3 min, ≤ 8 GB).
LLM_CASES: dict[str, tuple[list[str], dict]] = {
    "llama-3.1-8b t3k tp8 decode": (
        ["tests/hf_configs/llama-3.1-8b", "-t", "t3k", "--tp", "8", "-q", TT_FORMATS,
         "--batch", "1", "--kv-len", "128", "--no-report"],
        {"tokens_per_s_user": 64.3}),
    "llama-3.1-70b t3k tp8 decode": (
        ["tests/hf_configs/llama-3.1-70b", "-t", "t3k", "--tp", "8", "-q", TT_FORMATS,
         "--batch", "1", "--kv-len", "128", "--no-report"],
        {"tokens_per_s_user": 16.6}),
    "llama-3.1-70b t3k tp8 prefill 128": (
        ["tests/hf_configs/llama-3.1-70b", "-t", "t3k", "--tp", "8", "-q", TT_FORMATS,
         "--batch", "1", "--seq-len", "128", "--no-report"],
        {"ttft_ms": 164.0}),
    "llama-3-70b large-x8 tp8 decode b32 kv4096": (
        ["tests/hf_configs/llama-3-70b", "-t", "large-x8", "--tp", "8", "--batch", "32",
         "--kv-len", "4096", "--replay-blocks", "6", "--no-report"],
        {"max_cpu_s": 180.0, "max_rss_mb": 8192.0}),
    "llama-3.1-405b large-x8 x 2 (16 chips) tp8 pp2 prefill 2048": (
        ["tests/hf_configs/llama-3.1-405b", "-t", "large-x8", "--set", "system.chips=16",
         "--set", "system.shape=[4,4]", "--tp", "8", "--pp", "2", "--batch", "1",
         "--seq-len", "2048", "--no-report"],
        {"max_cpu_s": 600.0, "max_rss_mb": 8192.0, "tokens": 2048}),
}
LLM_RESULTS = ROOT / "benchmarks" / "data" / "multichip_llm.json"
LLM_TARGET_REL = 0.25


def run_llm_case(name: str) -> dict:
    """One LLM case, measured (benchmarks/measured_run.py): the figures the table needs."""
    from measured_run import measured_run

    args, ref = LLM_CASES[name]
    m = measured_run(args)
    llm = m["stats"].get("llm") or {}
    return {"args": args, "reference": ref, "wall_s": round(m["wall_s"], 1),
            "cpu_s": round(m["cpu_s"], 1), "rss_mb": round(m["rss_mb"]),
            "total_ns": m["stats"]["total_ns"], "phase": llm.get("phase"),
            "entries": m["stats"].get("entry_count"),
            "collective_entries": m["stats"]["parallel"]["collective_entries"],
            "replay": {k: v for k, v in (m["stats"].get("replay") or {}).items()
                       if k in ("block_period_ns", "periods_ns", "anchored_periods_ns",
                                "period_deviation", "period_cycle_blocks", "warmup_blocks")}}


def llm_verdict(r: dict) -> tuple[str, str]:
    """(the simulated figure, its comparison) of a kept result."""
    ref, ms = r["reference"], r["total_ns"] / 1e6
    if "tokens_per_s_user" in ref:
        tps = 1e3 / ms
        err = tps / ref["tokens_per_s_user"] - 1
        ok = "within" if abs(err) <= LLM_TARGET_REL else "OUTSIDE"
        return (f"{tps:.1f} tokens/s/user ({ms:.2f} ms a token)",
                f"{ref['tokens_per_s_user']} published: {err:+.1%} ({ok} 25 %)")
    if "ttft_ms" in ref:
        err = ms / ref["ttft_ms"] - 1
        ok = "within" if abs(err) <= LLM_TARGET_REL else "OUTSIDE"
        return f"TTFT {ms:.1f} ms", f"{ref['ttft_ms']} ms published: {err:+.1%} ({ok} 25 %)"
    ok = r["cpu_s"] <= ref["max_cpu_s"] and r["rss_mb"] <= ref["max_rss_mb"]
    tokens = ref.get("tokens", 32)  # a step's tokens (batch x new tokens per sequence)
    return (f"{ms:.2f} ms a step ({tokens * 1e3 / ms:.0f} tokens/s)",
            f"limits {ref['max_cpu_s']:.0f} CPU s, {ref['max_rss_mb'] / 1024:.0f} GB: "
            f"{'met' if ok else 'NOT met'}")


def llm_section(results: dict) -> list[str]:
    rows = ["## LLMs over many chips (`benchmarks/multichip.py --llm`)", "",
            "<!-- multichip-llm:begin -->",
            "Command: `.venv/bin/python benchmarks/multichip.py --llm all` (each case in a "
            "process of its own; `--llm NAME` reruns one). `kernbench run --tp 8` (ADR-0970; "
            "`--pp 2`: ADR-1040), "
            "shape-only models from tests/hf_configs, block replay; `--tp` alone merges the "
            "ranks' program as it streams (ADR-1190); wall time on a shared "
            "machine, CPU seconds are the comparable figure.", "",
            "| case | simulated | against | wall s | CPU s | peak RSS MB | CMDQ entries "
            "(collectives) |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for name in LLM_CASES:
        r = results.get(name)
        if r is None:
            rows.append(f"| {name} | not run | – | – | – | – | – |")
            continue
        if "refused" in r:  # the run ended without a figure: why (docs/fidelity.md)
            rows.append(f"| {name} | no figure: {r['refused']} | – | – | – | – | – |")
            continue
        if "unfinished" in r:  # stopped before its end: what was measured until then
            rows.append(f"| {name} | not finished: {r['unfinished']} | – | – | "
                        f"{r['cpu_s']} so far | {r['rss_mb']} so far | {r['entries']} "
                        f"({r['collective_entries']}) |")
            continue
        sim, against = llm_verdict(r)
        rows.append(f"| {name} | {sim} | {against} | {r['wall_s']} | {r['cpu_s']} | "
                    f"{r['rss_mb']} | {r['entries']} ({r['collective_entries']}) |")
    rows += ["", "Arguments of each case: `LLM_CASES` in benchmarks/multichip.py.",
             "<!-- multichip-llm:end -->"]
    return rows


def main_llm(names: list[str], doc: bool) -> int:
    import results_file

    results = results_file.load(LLM_RESULTS)
    for name in (list(LLM_CASES) if names == ["all"] else names):
        if name not in LLM_CASES:
            raise SystemExit(f"unknown case {name!r}; cases: {', '.join(LLM_CASES)}")
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results = results_file.record(LLM_RESULTS, name, run_llm_case(name))
        print(f"  {llm_verdict(results[name])}", file=sys.stderr, flush=True)
    lines = llm_section(results)
    text = "\n".join(lines)
    print(text)
    if doc:
        from doc_section import replace_section

        replace_section(ROOT / "docs" / "performance.md", lines[0],
                        "<!-- multichip-llm:begin -->", "<!-- multichip-llm:end -->", text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--no-doc", action="store_true", help="print only; leave the docs alone")
    ap.add_argument("--llm", nargs="+", metavar="CASE",
                    help=f"LLM cases (or all): {'; '.join(LLM_CASES)}")
    ap.add_argument("--ep", nargs="+", metavar="CASE",
                    help="expert-parallel MoE cases (or all): benchmarks/multichip_ep.py")
    args = ap.parse_args(argv)
    if args.ep:
        from multichip_ep import main_ep

        return main_ep(args.ep, not args.no_doc)
    if args.llm:
        return main_llm(args.llm, not args.no_doc)
    rows = []
    b = 1024
    t0 = time.perf_counter()
    while b <= args.max_bytes:
        us, n = simulate_all_reduce(b)
        rows.append((b, us, n))
        print(f"{b:>9} B  {us:10.2f} us  fit {fit_us(b):10.2f} us  ({us / fit_us(b) - 1:+.1%})",
              file=sys.stderr, flush=True)
        b *= 2
    algos = [(a, *simulate_all_reduce(1 << 20, a)) for a in ("ring", "direct", "2d")]
    cmp = compare([(b, t) for b, t, _ in rows])
    lines = ["## Collectives on t3k (`benchmarks/multichip.py`)", "",
             "<!-- multichip:begin -->",
             f"Command: `.venv/bin/python benchmarks/multichip.py` ({time.perf_counter() - t0:.0f} s "
             "here). bf16 ring all-reduce over the 8 chips of `t3k`, bidirectional, one link "
             "per neighbour pair (the lowering's tile rule was revised once "
             "after a first comparison, and its tile order once after finding why the time "
             "per byte grew above 16 MiB: docs/fidelity.md, ADR-1140). One fitted parameter, "
             "fitted on other rows: the ring fabric's flow control, "
             f"{_flow_control_ns()} ns per packet (`system.link.ring_flow_control_ns`, fitted "
             "on tt-metal's n = 8 ring all_gather and reduce_scatter rows from 8 to 64 MiB by "
             "`benchmarks/ring_flow_fit.py`, ADR-1220): the rows below are predictions, not "
             "fits. Line rate: 2 × 12.5 "
             "GB/s of bus bandwidth (both directions of one link); the links frame tt-metal's "
             "fabric packets (4352 B payload, 48 B header, 1500 B Ethernet frames adding 50 B "
             "each: 95.6 % payload efficiency, 2 × 11.96 GB/s of payload; docs/topologies.md, "
             "ADR-1145). Fit: tt-metal "
             "`tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md`, all_reduce "
             f"ring: {FIT_START_US} us + {FIT_PER_HOP_US} us · N/2 + 2(N−1)/N · bytes / "
             f"{FIT_BUSBW_GBS} GB/s; measured: the same table's n = 8 ring rows.", "",
             *_table(rows), "",
             f"Largest |sim / fit − 1| from {TARGET_FROM_BYTES} bytes up: "
             f"{cmp['max_target_error']:.1%} (target {TARGET_REL:.0%}: "
             f"{'met' if cmp['within'] else 'NOT met'}).", "",
             "All-reduce of 1 MiB per chip on t3k by algorithm:", "",
             "| algorithm | simulated (µs) | CMDQ entries |", "| --- | ---: | ---: |",
             *(f"| {a} | {t:.2f} | {n} |" for a, t, n in algos), "",
             "<!-- multichip:end -->"]
    text = "\n".join(lines)
    print(text)
    if not args.no_doc:
        from doc_section import replace_section

        replace_section(ROOT / "docs" / "performance.md", lines[0], "<!-- multichip:begin -->",
                        "<!-- multichip:end -->", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
