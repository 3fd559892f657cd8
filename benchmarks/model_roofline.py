"""Whole models against their roofline: per model and topology the end-to-end roofline
fraction, the three largest losses (layer, bound_by, simulated − bound), the cost model's
estimate against the simulated time, and the wall time of the run. Writes the table into
docs/performance.md under "## Whole models against the roofline" (between marker
comments, so a re-run replaces it).

    .venv/bin/python benchmarks/model_roofline.py            # the full set (tens of minutes)
    .venv/bin/python benchmarks/model_roofline.py --quick    # seq 128 / decode / stack, zoo on small
    .venv/bin/python benchmarks/model_roofline.py --cases gpt2-small-128 --topology base --no-write

Cases: gpt2-small prefill at seq 128 and 1024 and a decode step with a 1024-token KV cache
(the built-in `gpt2-small`), a GPT-style stack written with onnx.helper with unfused
attention (benchmarks/models.py `gpt_stack`), and every model in tests/zoo on `small` and
`base`. Every case is one `kernbench run --no-trace --quiet` in this process (with the
report: a run without trace and report streams its entries and has no estimate);
simulated numbers are deterministic, wall times depend on the machine's load.

The cost model's columns: end to end, estimate_ns ÷ total_ns; per layer, the share of
layers whose estimate is within ±15 % of the simulated figure, by count and weighted by
the simulated figure, for `busy_ns` (the layer's own time: the longest any PE ran its
entries) and for `ns` (its span, which includes waiting behind the layers it overlaps).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import onnx  # noqa: E402
from doc_section import replace_section  # noqa: E402

from kernbench.cli import main as cli_main  # noqa: E402
from models import gpt_stack  # noqa: E402

ZOO = ROOT / "tests" / "zoo"
DOC = ROOT / "docs" / "performance.md"
TITLE = "## Whole models against the roofline"
BEGIN, END = "<!-- model-roofline:begin -->", "<!-- model-roofline:end -->"
#: the onnx.helper stack: 4 layers of GPT-2-small width at seq 128
STACK = {"n_layer": 4, "d": 768, "heads": 12, "seq": 128}


@dataclass(frozen=True)
class Case:
    """One model: its name in the table, the CLI model argument, extra CLI args, and the
    topologies it runs on by default."""

    name: str
    model: str
    args: tuple[str, ...] = ()
    topologies: tuple[str, ...] = ("base",)


@dataclass
class Row:
    """One case on one topology (ok False: the run failed; `error` says how)."""

    ok: bool
    error: str = ""
    total_ns: float = 0.0
    roofline: float = 0.0
    bound_by: str = ""
    losses: list[tuple[str, str, float]] = field(default_factory=list)
    estimate_ns: float = 0.0
    #: per layer (simulated, estimated) of busy_ns, then of ns
    busy: list[tuple[float, float]] = field(default_factory=list)
    span: list[tuple[float, float]] = field(default_factory=list)
    wall_s: float = 0.0


def cases(stack_path: Path) -> list[Case]:
    """Every case of the full set, in table order."""
    out = [Case("gpt2-small prefill 128", "gpt2-small", ("--seq-len", "128")),
           Case("gpt2-small prefill 1024", "gpt2-small", ("--seq-len", "1024")),
           Case("gpt2-small decode kv 1024", "gpt2-small", ("--seq-len", "1", "--kv-len", "1024")),
           Case("onnx.helper GPT stack (unfused attention)", str(stack_path))]
    out += [Case(f"zoo/{p.stem}", str(p), topologies=("small", "base"))
            for p in sorted(ZOO.glob("*.onnx"))]
    return out


def run_case(case: Case, topology: str, out: Path) -> Row:
    """Run one case in-process (output swallowed) and read its stats.json."""
    args = ["run", case.model, *case.args, "--topology", topology, "--out", str(out),
            "--no-trace", "--quiet"]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli_main(args)
    wall = time.perf_counter() - t0
    stats_path = out / "stats.json"
    if code not in (0, 1) or not stats_path.exists():
        return Row(False, f"exit {code}: {err.getvalue().strip().splitlines()[-1:]}", wall_s=wall)
    s = json.loads(stats_path.read_text())
    layers = s.get("layers", {})
    lost = sorted(((v["ns"] - v["bound_ns"], lid, v["bound_by"]) for lid, v in layers.items()),
                  reverse=True)[:3]
    busy = [(v["busy_ns"], v["estimate_busy_ns"]) for v in layers.values()
            if "estimate_busy_ns" in v]
    span = [(v["ns"], v["estimate_ns"]) for v in layers.values() if "estimate_ns" in v]
    return Row(True, total_ns=s["total_ns"], roofline=s.get("roofline_fraction", 0.0),
               bound_by=s.get("model_bound", {}).get("bound_by", ""),
               losses=[(lid, by, ns) for ns, lid, by in lost],
               estimate_ns=s.get("estimate_ns", 0.0), busy=busy, span=span, wall_s=wall)


def within(pairs: list[tuple[float, float]], tol: float = 0.15) -> tuple[float, float]:
    """Share of (simulated, estimated) pairs with |estimated − simulated| ≤ tol × simulated:
    by count and weighted by the simulated figure (a layer with no time counts as within
    when its estimate is 0 too)."""
    if not pairs:
        return 0.0, 0.0
    ok = [s for s, e in pairs if abs(e - s) <= tol * s]
    weight = sum(s for s, _ in pairs)
    return len(ok) / len(pairs), (sum(ok) / weight if weight else 1.0)


def _us(ns: float) -> str:
    return f"{ns / 1000:,.1f}"


def _share(pairs: list[tuple[float, float]]) -> str:
    n, w = within(pairs)
    return f"{100 * n:.0f} % / {100 * w:.0f} %" if pairs else "–"


def render(rows: list[tuple[Case, str, Row]]) -> str:
    """The markdown table, then the per-layer estimate errors over all runs."""
    lines = ["| model | topology | simulated µs | roofline fraction | bound by | largest losses "
             "(layer, bound by, µs lost) | estimate µs (÷ simulated) | layers within 15 %: "
             "busy (count / time) | span (count / time) | wall s |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    all_busy: list[tuple[float, float]] = []
    all_span: list[tuple[float, float]] = []
    for case, topo, r in rows:
        if not r.ok:
            lines.append(f"| {case.name} | {topo} | – | – | – | failed: {r.error} | – | – | – | "
                         f"{r.wall_s:.1f} |")
            continue
        losses = "; ".join(f"{lid} ({by}) {_us(ns)}" for lid, by, ns in r.losses)
        ratio = r.estimate_ns / r.total_ns if r.total_ns else 0.0
        all_busy += r.busy
        all_span += r.span
        lines.append(f"| {case.name} | {topo} | {_us(r.total_ns)} | {r.roofline:.3f} | "
                     f"{r.bound_by} | {losses} | {_us(r.estimate_ns)} ({ratio:.2f}) | "
                     f"{_share(r.busy)} | {_share(r.span)} | {r.wall_s:.1f} |")
    for name, pairs in (("busy_ns", all_busy), ("ns (span)", all_span)):
        errs = [(e - s) / s for s, e in pairs if s > 0]
        if len(errs) < 2:
            continue
        q = statistics.quantiles(errs, n=10)
        n, w = within(pairs)
        lines += ["", f"Per-layer estimate error of {name}, (estimate − simulated) / simulated, "
                  f"over all {len(errs)} layers of these runs: 10th percentile "
                  f"{100 * q[0]:+.1f} %, median {100 * statistics.median(errs):+.1f} %, 90th "
                  f"percentile {100 * q[-1]:+.1f} %; {100 * n:.0f} % of the layers "
                  f"({100 * w:.0f} % of the time) within ±15 %."]
    return "\n".join(lines)


def write_doc(table: str, command: str) -> None:
    """Replace (or append) the marked section of docs/performance.md."""
    section = (f"{TITLE}\n\n{BEGIN}\n"
               f"Generated by `{command}` (do not edit by hand; see the script's docstring "
               "for the full set). Roofline fraction = Σ layer bound / simulated time "
               "(docs/stats.md). A loss is a layer's simulated span minus its bound; spans "
               "overlap when layers run concurrently, so losses do not add up to the total. "
               "Estimate: the cost model's end-to-end figure (`stats.json` estimate_ns, "
               "docs/compiler.md \"Cost model\"); per layer its `estimate_busy_ns` against "
               "`busy_ns` and its `estimate_ns` against `ns` (docs/stats.md). Wall: the "
               "whole `kernbench run` (compile, simulate, report) on the shared build machine.\n\n" + table + "\n" + END)
    replace_section(DOC, TITLE, BEGIN, END, section)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="skip gpt2-small at seq 1024 and run the zoo on small only")
    ap.add_argument("--cases", nargs="*", help="substrings of case names to keep")
    ap.add_argument("--topology", nargs="*", help="only these topologies")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Path(tmp) / "gpt_stack.onnx"
        onnx.save(gpt_stack(**STACK), stack)
        todo: list[tuple[Case, str]] = []
        for c in cases(stack):
            if args.cases and not any(s in c.name for s in args.cases):
                continue
            if args.quick and "1024" in c.name and "prefill" in c.name:
                continue
            topos = ("small",) if args.quick and c.name.startswith("zoo/") else c.topologies
            todo += [(c, t) for t in topos if not args.topology or t in args.topology]
        rows = []
        for i, (c, t) in enumerate(todo):
            r = run_case(c, t, Path(tmp) / f"run{i}")
            rows.append((c, t, r))
            print(f"{c.name} {t}: {'ok' if r.ok else r.error} "
                  f"{r.roofline:.3f} {r.wall_s:.1f} s", file=sys.stderr)
    table = render(rows)
    print(table)
    if not args.no_write:
        cmd = " ".join([".venv/bin/python benchmarks/model_roofline.py", *sys.argv[1:]])
        write_doc(table, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
