"""Fit the `t3k` preset's ring flow control (`system.link.ring_flow_control_ns`) on
tt-metal's measured 8-chip ring all_gather and reduce_scatter rows; the all-reduce rows
are not used (`benchmarks/multichip.py` then predicts them with the fitted value).

Run: `.venv/bin/python benchmarks/ring_flow_fit.py` (a few minutes; `--rows all_gather`
or `--rows reduce_scatter` fits one op's rows alone, `--no-doc` leaves docs/ alone).

Protocol (docs/fidelity.md, "Collectives on t3k"): the rows are the n = 8 ring rows of
`tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md` (public repository
`tenstorrent/tt-metal`) from 8 MiB to 64 MiB, where the per-call cost is a few percent of
the time; each is simulated as `kernbench collective OP -t t3k --bytes SIZE` with the
one parameter `c` set, every other value the preset's. Each row is simulated at every
value of `GRID_NS` and a least-squares line is put through its times (each time is close
to linear in `c`, the links being the bottleneck; the line smooths the small steps the
order of events gives one simulation); `c` minimises the sum over the rows of
(line(c) / measured − 1)², in closed form. It is rounded to 0.5 ns, and the rows are
simulated again with it and with c = 0 for the table (docs/performance.md, "Ring flow
control fit on t3k").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

KEY = "system.link.ring_flow_control_ns"

#: measured kernel times (µs), n = 8, ring dram, by (op, size): tt-metal
#: SUMMARY_wormhole_b0_bfloat16_6144.md (size: all_gather's output, reduce_scatter's input)
MEASURED_US = {
    ("all_gather", 8 << 20): 374.56, ("all_gather", 16 << 20): 727.02,
    ("all_gather", 32 << 20): 1432.40, ("all_gather", 64 << 20): 2843.17,
    ("reduce_scatter", 8 << 20): 441.14, ("reduce_scatter", 16 << 20): 882.38,
    ("reduce_scatter", 32 << 20): 1781.40, ("reduce_scatter", 64 << 20): 3572.99,
}
OPS = ("all_gather", "reduce_scatter")


def simulate_rows(rows: list[tuple[str, int]], c: float) -> dict[tuple[str, int], float]:
    """Simulated µs of each (op, size) row with the ring flow control set to `c` ns."""
    from multichip import simulate_collective

    out = {}
    for op, b in rows:
        out[(op, b)] = simulate_collective(op, b, overrides=(f"{KEY}={c!r}",))[0]
        print(f"  c = {c:.3f} ns  {op} {b >> 20} MiB  {out[(op, b)]:.2f} us  "
              f"({out[(op, b)] / MEASURED_US[(op, b)] - 1:+.1%})", file=sys.stderr, flush=True)
    return out


#: the values of c (ns) every row is simulated at; the fit must fall inside them
GRID_NS = (30.0, 40.0, 50.0, 60.0, 70.0, 80.0)


def row_lines(rows: list[tuple[str, int]], evals: dict[float, dict]
              ) -> dict[tuple[str, int], tuple[float, float]]:
    """Each row's least-squares line (µs at c = 0, µs per ns of c) through its simulated
    times at the grid's values of c: it smooths the few-tenths-of-a-percent steps that
    the order of events gives a single simulation."""
    cs = sorted(evals)
    mc = sum(cs) / len(cs)
    out = {}
    for r in rows:
        ts = [evals[c][r] for c in cs]
        mt = sum(ts) / len(ts)
        b = (sum((c - mc) * (t - mt) for c, t in zip(cs, ts, strict=True))
             / sum((c - mc) ** 2 for c in cs))
        out[r] = (mt - b * mc, b)
    return out


def least_squares_c(lines: dict[tuple[str, int], tuple[float, float]]) -> float:
    """The c minimising the sum over rows of ((a + b·c) / measured − 1)² (closed form)."""
    num = den = 0.0
    for r, (a, b) in lines.items():
        m = MEASURED_US[r]
        num += b / m * (1 - a / m)
        den += (b / m) ** 2
    return num / den


def fit(rows: list[tuple[str, int]]) -> tuple[float, dict]:
    """(fitted c in ns, each row's line): simulate the grid, fit the lines, solve."""
    evals = {c: simulate_rows(rows, c) for c in GRID_NS}
    lines = row_lines(rows, evals)
    c = least_squares_c(lines)
    if not GRID_NS[0] <= c <= GRID_NS[-1]:
        raise SystemExit(f"the fitted c = {c:.2f} ns lies outside the grid {GRID_NS}: "
                         "widen GRID_NS")
    return c, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", choices=("both", *OPS), default="both",
                    help="fit on both ops' rows (the protocol) or one op's")
    ap.add_argument("--no-doc", action="store_true", help="print only; leave the docs alone")
    args = ap.parse_args(argv)
    ops = OPS if args.rows == "both" else (args.rows,)
    rows = [r for r in MEASURED_US if r[0] in ops]
    t0 = time.process_time()
    c, lines = fit(rows)
    c_round = round(c * 2) / 2
    final = simulate_rows(rows, c_round)
    base = simulate_rows(rows, 0.0)
    cpu = time.process_time() - t0
    lines = ["## Ring flow control fit on t3k (`benchmarks/ring_flow_fit.py`)", "",
             "<!-- ring-flow-fit:begin -->",
             f"Command: `.venv/bin/python benchmarks/ring_flow_fit.py` ({cpu:.0f} CPU s here). "
             f"Fits `{KEY}` of `t3k` on tt-metal's measured n = 8 ring rows of "
             f"{' and '.join(ops)} from 8 to 64 MiB "
             "(`tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md`; size: "
             "all_gather's output, reduce_scatter's input per chip), least squares on "
             "sim / measured − 1; the all-reduce rows are not used (they are predicted: "
             "\"Collectives on t3k\"). Each row simulated at c = "
             f"{', '.join(f'{g:g}' for g in GRID_NS)} ns, a least-squares line through "
             f"its times; fitted c = {c:.2f} ns, rounded to **{c_round} ns per packet** "
             "(the preset's value).", "",
             "| op | bytes | measured (µs) | simulated, c = 0 (µs) | sim / measured − 1 | "
             f"simulated, c = {c_round} (µs) | sim / measured − 1 | busbw sim / measured "
             "(GB/s) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        op, b = r
        m, t0_us, t1 = MEASURED_US[r], base[r], final[r]
        bw = 7 / 8 * b / 1e3  # (N−1)/N · size, bytes per µs → GB/s below
        lines.append(f"| {op} | {b} | {m:.2f} | {t0_us:.2f} | {t0_us / m - 1:+.1%} | "
                     f"{t1:.2f} | {t1 / m - 1:+.1%} | {bw / t1:.2f} / {bw / m:.2f} |")
    worst = max(abs(final[r] / MEASURED_US[r] - 1) for r in rows)
    lines += ["", f"Largest |sim / measured − 1| of the fitted rows at c = {c_round} ns: "
              f"{worst:.1%}.", "<!-- ring-flow-fit:end -->"]
    text = "\n".join(lines)
    print(text)
    if not args.no_doc and args.rows == "both":
        from doc_section import replace_section

        replace_section(ROOT / "docs" / "performance.md", lines[0],
                        "<!-- ring-flow-fit:begin -->", "<!-- ring-flow-fit:end -->", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
