"""Serving's step programs of Llama-3-8B on `large`, one by one (ADR-1150).

    .venv/bin/python benchmarks/serve_programs.py --past 16 [--replay-blocks 4] [--samples FILE]

simulates decode at batch 16 with 512, 528, …, 640 past tokens (the range of the issue's
workload: prompt 512, output 128; `--past-range 512:576:1` every count of another range),
the given decoder blocks before block replay (default serve's and run's, 4), and prints
their simulated ms: how the KV length moves a decode step between the bucket rule's
edges, and the programs the rule asks on that profile with other grids, tolerances and
midpoint checks (ADR-1240, ADR-1300).

    .venv/bin/python benchmarks/serve_programs.py --blocks 1,1,512 16,1,512 [--samples FILE]

simulates each shape with 3 and 4 decoder blocks before block replay and with every
block (`--exact`), and prints the replayed totals' error against the exact one and each
program's CPU s.

    .venv/bin/python benchmarks/serve_programs.py --batch 512 [--samples FILE]

simulates decode at every batch 1..32 with 512 past tokens (the batches of the issue's
workload at `--max-batch 32`) and prints their simulated ms and CPU s, then the programs
the bucket rule asks for each batch 1..32 with 16 (the rule), 8, 4 and 2 edges an octave
for the batch (exact up to that many), on that profile, and the worst error of the
interpolated times against the simulated ones (ADR-1200). Every program runs in this process (CPU s by time.process_time);
`--samples FILE` keeps them (JSON) across runs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "hf_configs" / "llama-3-8b"


def simulated(shape: tuple[int, int, int], blocks: int, work: Path) -> dict:
    """ns and CPU s of one program; `blocks` 0: every block (`--exact`)."""
    from kernbench.host.models import ShapeOptions, resolve_model
    from kernbench.host.run import RunHooks, RunOptions, run_model
    from kernbench.topology import load_topology

    tmp = Path(tempfile.mkdtemp(dir=work))
    c0 = time.process_time()
    res = resolve_model(MODEL, ShapeOptions(*shape), tmp / "model", None)
    opts = RunOptions(trace=False, report=False, write_cmdq=False, write_weights=False,
                      bundle=tmp / "bundle", exact=blocks == 0, replay_blocks=blocks or 4)
    st = run_model(res.path, load_topology("large"), tmp / "out", opts,
                   RunHooks(note=lambda *_: None)).stats
    rep = st.get("replay", {})
    return {"ns": float(st["total_ns"]), "cpu_s": round(time.process_time() - c0, 2),
            "period_deviation": rep.get("period_deviation")}


def rule_on_profile(batch: int, ns: dict[int, float]) -> None:
    """The programs the bucket rule asks for every past count in the profile's range,
    with the sixteenth-, eighth- and quarter-octave grid for past tokens, the rule's
    tolerances and a half-percent one for past tokens too (ADR-1240), and with every
    midpoint checked or only where the edges' times disagree (ADR-1300), on the sampled
    profile (linear between the samples: a step inside a gap asks for more), and the
    worst and mean error of the interpolated times against the profile's."""
    from kernbench.host.serve.buckets import AGREE, LINEAR_TOL, TOLERANCE, edges, interpolate

    ks = sorted(ns)

    def t(k: int) -> float:
        a = max(x for x in ks if x <= k)
        b = min(x for x in ks if x >= k)
        return ns[a] if a == b else ns[a] + (ns[b] - ns[a]) * (k - a) / (b - a)

    print("\n| past edges an octave | past tolerance | midpoints | programs | "
          "past tokens simulated | worst error | mean error |\n"
          "| ---: | ---: | --- | ---: | --- | ---: | ---: |")
    for rule in ((16, 16, 16), (16, 16, 8), (16, 16, 4)):
        inside = [k for k in range(ks[0], ks[-1] + 1)
                  if ks[0] <= edges(k, rule[2])[0] and edges(k, rule[2])[1] <= ks[-1]]
        between = any(len(set(edges(k, rule[2]))) == 2 for k in inside)
        for tol in (TOLERANCE, (LINEAR_TOL,) * 3) if between else ():
            for agree in (0, AGREE):
                asked: set[tuple[int, ...]] = set()
                errs = [interpolate((batch, 1, k), lambda c, asked=asked: asked.add(c)
                                    or t(c[2]), per_octave=rule, tol=tol, agree=agree)
                        / t(k) - 1 for k in inside]
                print(f"| {rule[2]} | {100 * tol[2]:.1f} % | "
                      f"{'every' if agree == 0 else 'edges disagree'} | {len(asked)} | "
                      f"{', '.join(str(c[2]) for c in sorted(asked))} | "
                      f"{100 * max(map(abs, errs)):.2f} % | "
                      f"{100 * sum(errs) / len(errs):+.2f} % |")


def batch_rule_on_profile(past: int, ns: dict[int, float]) -> None:
    """The programs the bucket rule asks for every batch in the profile, for several
    grids of the batch dimension (past tokens on an edge, so exact), and the worst error
    of the interpolated time against the simulated one."""
    from kernbench.host.serve.buckets import interpolate

    print("\n| batch edges an octave | programs for batch 1..32 | batches simulated | "
          "worst error |\n| ---: | ---: | --- | ---: |")
    for per in (16, 8, 4, 2):
        asked: set[tuple[int, ...]] = set()
        worst = max(abs(interpolate((b, 1, past), lambda c, asked=asked: asked.add(c)
                                    or ns[c[0]], per_octave=(per, 16, 16)) / ns[b] - 1)
                    for b in sorted(ns))
        print(f"| {per} | {len(asked)} | {', '.join(str(c[0]) for c in sorted(asked))} | "
              f"{100 * worst:.2f} % |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--past", type=int, default=None, help="decode batch: past 512..640")
    ap.add_argument("--past-range", default="512:640:16",
                    help="--past: FIRST:LAST:STEP past-token counts (every one: 512:576:1)")
    ap.add_argument("--blocks", nargs="*", default=None, help="shapes B,S,K: 3 / 4 / all")
    ap.add_argument("--batch", type=int, default=None, help="decode at this past: batch 1..32")
    ap.add_argument("--replay-blocks", type=int, default=None, help="--past: simulated blocks")
    ap.add_argument("--samples", type=Path, default=None, help="keep programs (JSON)")
    a = ap.parse_args()
    from kernbench.host.block_replay import SIMULATED_BLOCKS

    past_blocks = a.replay_blocks or SIMULATED_BLOCKS
    got: dict[str, dict] = {}
    if a.samples is not None and a.samples.is_file():
        got = json.loads(a.samples.read_text())

    def get(shape: tuple[int, int, int], blocks: int, work: Path) -> dict:
        key = f"{','.join(map(str, shape))}@{blocks}"
        if key not in got:
            got[key] = simulated(shape, blocks, work)
            if a.samples is not None:
                a.samples.write_text(json.dumps(got, indent=1) + "\n")
        return got[key]

    with tempfile.TemporaryDirectory() as d:
        if a.past is not None:
            first, last, step = (int(x) for x in a.past_range.split(":"))
            ks = range(first, last + 1, step)
            rows = [get((a.past, 1, k), past_blocks, Path(d)) for k in ks]
            print(f"| past tokens | batch {a.past}, {past_blocks} blocks, ms | CPU s |\n"
                  "| ---: | ---: | ---: |")
            for k, r in zip(ks, rows, strict=True):
                print(f"| {k} | {r['ns'] / 1e6:.3f} | {r['cpu_s']:.1f} |")
            rule_on_profile(a.past, dict(zip(ks, (r["ns"] for r in rows), strict=True)))
        if a.batch is not None:
            bs = range(1, 33)
            rows = [get((b, 1, a.batch), past_blocks, Path(d)) for b in bs]
            print(f"| batch (past {a.batch}) | ms | CPU s |\n| ---: | ---: | ---: |")
            for b, r in zip(bs, rows, strict=True):
                print(f"| {b} | {r['ns'] / 1e6:.3f} | {r['cpu_s']:.1f} |")
            batch_rule_on_profile(a.batch, dict(zip(bs, (r["ns"] for r in rows), strict=True)))
        if a.blocks:
            print("| program (batch, new, past) | every block ms | 4 blocks | 3 blocks | "
                  "CPU s: every block / 4 / 3 |\n| --- | ---: | ---: | ---: | ---: |")
            for text in a.blocks:
                shape = tuple(int(x) for x in text.split(","))
                ex, b4, b3 = (get(shape, n, Path(d)) for n in (0, 4, 3))  # type: ignore[arg-type]

                def err(r: dict, ex: dict = ex) -> str:
                    return f"{r['ns'] / 1e6:.4f} ({100 * (r['ns'] / ex['ns'] - 1):+.2f} %)"

                print(f"| {shape} | {ex['ns'] / 1e6:.4f} | {err(b4)} | {err(b3)} | "
                      f"{ex['cpu_s']:.1f} / {b4['cpu_s']:.1f} / {b3['cpu_s']:.1f} |")


if __name__ == "__main__":
    main()
