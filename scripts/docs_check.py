"""Re-run the commands the docs name and check every marked figure and promised file
(`make docs-check`; the cheap runs also in tests/test_docs_figures.py). ADR-0935.

Markers are HTML comments, invisible in rendered markdown:

    <!-- kb-run ID -->                 the next ```sh block's first `kernbench` line is run ID
    <!-- kb-run ID: kernbench ARGS --> run ID is this command (for figures in prose)
    <!-- kb-run ID slow ... -->        as above, only in `make docs-check` (not the test suite)
    <!-- kb-run ID noout: ... -->      a command without --out (its figures are in `stdout:`)
    <!-- kb-fig ID KEY UNIT -->12.3 ms the figure is the number right after the marker
    <!-- kb-fig ID KEY UNIT after="time to first token" -->
                                       the figure is the number after that text, in what
                                       follows the marker (e.g. inside the next code block);
                                       `nth=2`: the second number after it;
                                       `after="^text"`: text that starts a line
    <!-- kb-file ID PATH -->           run ID's --out folder holds PATH (a glob)
    <!-- kb-nofile ID GLOB -->         ... and holds no file matching GLOB

KEY is `FILE:EXPR` (FILE in the run's --out, default stats.json; `stdout` is what the
command printed, read as JSON). In a JSON file EXPR is a
dotted path (`llm.ttft_ns`); in a CSV file `min(COLUMN|COL=VALUE,...)` or `max(...)` over the
rows the filters keep; a path part `NAME[FIELD=VALUE]` picks the element of list NAME
whose FIELD is VALUE (`stdout:figures[figure=total_ns].ratio`). UNIT converts the value the file holds (ns, pJ, mW, bytes, a
fraction) into the unit the doc shows: ns µs ms s · pJ nJ µJ mJ J · mW W · B KiB MiB GiB ·
GB/s TB/s (of GB/s) ·
% (a fraction × 100) · B-params (× 1e-9) · = (as is). A figure matches when it equals the
value rounded to the decimals the doc shows (thousands may be grouped by `,` or spaces).

Each run gets its own fresh `--out` (the command's `--out`/`-o` is replaced, or added) in a
temporary folder and must exit 0. Problems are printed one a line; exit 1 if any.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fnmatch
import io
import json
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
UNITS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "pJ": 1.0, "nJ": 1e3,
         "µJ": 1e6, "uJ": 1e6, "mJ": 1e9, "J": 1e12, "mW": 1.0, "W": 1e3, "B": 1.0,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "%": 0.01, "B-params": 1e9, "=": 1.0,
         "GB/s": 1.0, "TB/s": 1e3}
MARKER = re.compile(r"<!--\s*kb-(run|fig|file|nofile)\s+(.*?)-->", re.S)
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:[, \u202f\u00a0]\d{3})+|\d+)(?:\.\d+)?")


@dataclass
class Run:
    id: str
    args: list[str]
    slow: bool
    where: str
    noout: bool = False
    figs: list[tuple[str, str, str, str]] = field(default_factory=list)  # key, unit, text, where
    files: list[tuple[bool, str, str]] = field(default_factory=list)  # present?, glob, where


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _next_block_command(text: str, pos: int) -> list[str] | None:
    m = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(text, pos)
    if m is None:
        return None
    for line in m.group(1).splitlines():
        line = line.split(" #", 1)[0].strip().removeprefix("$ ")
        if line.startswith("kernbench "):
            return shlex.split(line)
    return None


def _shown(text: str, after: str | None, nth: int = 1) -> str | None:
    """The nth number in `text` (after the first `after`, when given; `^text`: text at
    the start of a line), markers left out."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    if after is not None:
        line_start = after.startswith("^")
        anchor = "\n" + after[1:] if line_start else after
        i = text.find(anchor)
        if i < 0:
            return None
        text = text[i + len(anchor):]
    found = NUMBER.findall(text[:200] if after is None else text)
    return found[nth - 1] if len(found) >= nth else None


def parse(path: Path) -> tuple[dict[str, Run], list[str]]:
    """The runs of one markdown file, with their figures and files; and marker errors."""
    text = path.read_text(encoding="utf-8")
    runs: dict[str, Run] = {}
    problems: list[str] = []
    for m in MARKER.finditer(text):
        if text[m.start() - 1:m.start()] == "`":
            continue  # a marker quoted in inline code is text about markers
        kind, body = m.group(1), m.group(2).strip()
        where = f"{path.relative_to(ROOT)}:{_line(text, m.start())}"
        if kind == "run":
            head, _, cmd = body.partition(":")
            words = head.split()
            args = shlex.split(cmd) if cmd.strip() else _next_block_command(text, m.end())
            if not words or not args or args[0] != "kernbench":
                problems.append(f"{where}: kb-run names no `kernbench` command")
                continue
            runs[words[0]] = Run(words[0], args[1:], "slow" in words[1:], where,
                                 noout="noout" in words[1:])
            continue
        words = shlex.split(body)
        run = runs.get(words[0]) if words else None
        if run is None:
            problems.append(f"{where}: kb-{kind} of an unknown run (a kb-run comes first)")
        elif kind == "fig":
            opts = dict(w.split("=", 1) for w in words[3:] if "=" in w)
            shown = _shown(text[m.end():], opts.get("after"), int(opts.get("nth", 1)))
            if len(words) < 3 or words[2] not in UNITS or shown is None:
                problems.append(f"{where}: kb-fig needs ID KEY UNIT and a number after it")
            else:
                run.figs.append((words[1], words[2], shown, where))
        else:
            run.files.append((kind == "file", words[1], where))
    return runs, problems


def _with_out(args: list[str], out: Path) -> list[str]:
    args = list(args)
    for i, a in enumerate(args[:-1]):
        if a in ("--out", "-o"):
            args[i + 1] = str(out)
            return args
    return [*args, "--out", str(out)]


def value_of(out: Path, key: str) -> Any:
    """The value KEY names in run folder `out` (module docstring)."""
    file, _, expr = key.rpartition(":")
    path = out.with_name(out.name + ".stdout") if file == "stdout" else out / (file or "stats.json")
    if path.suffix == ".csv":
        m = re.fullmatch(r"(min|max)\((\w+)(?:\|(.*))?\)", expr)
        if m is None:
            raise ValueError(f"CSV key {expr!r} is not min(COL|A=B) or max(...)")
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        for cond in filter(None, (m.group(3) or "").split(",")):
            col, _, want = cond.partition("=")
            rows = [r for r in rows if r.get(col) == want]
        vals = [float(r[m.group(2)]) for r in rows if r.get(m.group(2))]
        return (min if m.group(1) == "min" else max)(vals) if vals else None
    cur: Any = json.loads(path.read_text(encoding="utf-8"))
    for part in expr.split("."):
        sel = re.fullmatch(r"(\w+)\[(\w+)=([^\]]+)\]", part)
        if sel is not None:  # a list's element by one of its fields: figures[figure=total_ns]
            items = cur.get(sel.group(1)) if isinstance(cur, dict) else None
            cur = next((x for x in items or [] if isinstance(x, dict)
                        and str(x.get(sel.group(2))) == sel.group(3)), None)
            continue
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def matches(shown: str, value: float, unit: str) -> bool:
    """`shown` (as the doc prints it) equals `value` in `unit`, to the decimals shown."""
    num = float(re.sub(r"[, \u202f\u00a0]", "", shown))
    decimals = len(shown.split(".", 1)[1]) if "." in shown else 0
    return abs(num - value / UNITS[unit]) <= 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12


def check_run(run: Run, tmp: Path) -> list[str]:
    """Run `run` into a fresh folder under `tmp` and check its figures and files."""
    from kernbench.cli import main

    out = tmp / run.id
    args = list(run.args) if run.noout else _with_out(run.args, out)
    if run.noout:
        out.mkdir(parents=True)
    with contextlib.redirect_stdout(io.StringIO()) as o, \
            contextlib.redirect_stderr(io.StringIO()) as e:
        code = main(args)
    out.with_name(out.name + ".stdout").write_text(o.getvalue(), encoding="utf-8")
    if code != 0:
        last = (e.getvalue().strip().splitlines() or [""])[-1]
        return [f"{run.where}: `kernbench {shlex.join(run.args)}` exited {code}: {last}"]
    problems = []
    for key, unit, shown, where in run.figs:
        try:
            v = value_of(out, key)
        except (OSError, ValueError) as ex:
            problems.append(f"{where}: {key}: {ex}")
            continue
        if not isinstance(v, (int, float)):
            problems.append(f"{where}: {key} is {v!r} in the run, the doc shows {shown}")
        elif not matches(shown, float(v), unit):
            got = float(v) / UNITS[unit]
            problems.append(f"{where}: {key}: the doc shows {shown} {unit}, the run gives "
                            f"{got:,.6g} {unit} (`kernbench {shlex.join(run.args)}`)")
    files = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    for present, glob, where in run.files:
        hit = [f for f in files if fnmatch.fnmatch(f, glob)]
        if present and not hit:
            problems.append(f"{where}: the run wrote no {glob} (it wrote {', '.join(sorted(files))})")
        if not present and hit:
            problems.append(f"{where}: the run wrote {', '.join(hit)}, which the doc says it does not")
    return problems


def check(paths: list[Path], slow: bool, only: str | None = None) -> tuple[list[str], int]:
    """(problems, runs checked) over the markdown files `paths`."""
    problems: list[str] = []
    runs: list[Run] = []
    for p in paths:
        r, probs = parse(p)
        problems += probs
        runs += [x for x in r.values() if (slow or not x.slow) and (only in (None, x.id))]
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(ROOT):  # the docs' paths
        for run in runs:
            problems += check_run(run, Path(d))
    return problems, len(runs)


FIGURE = re.compile(r"(?<![\w.])\d[\d,.  ]*\s?(?:ns|µs|ms|s|pJ|nJ|µJ|mJ|J|mW|W|GB/s|TB/s|MB|GB|"
                    r"MiB|GiB|%|×|TOPS|TFLOPS|tokens/s)(?![\w/])")


def unmarked(path: Path) -> list[str]:
    """Lines with a figure in a unit (outside code blocks of commands) and no kb-fig marker:
    the figures `docs-check` does not cover yet (a survey, not a failure)."""
    out = []
    text = path.read_text(encoding="utf-8")
    fenced = covered = False
    prev = ""
    for i, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
            covered = fenced and "kb-" in prev  # a block right after markers: checked by them
            continue
        prev = line if line.strip() else prev
        if covered or "kb-fig" in line or "kb-run" in line or \
                line.lstrip().startswith(("kernbench ", "$ kernbench ")):
            continue
        if FIGURE.search(re.sub(r"`[^`]*`", "", line)):
            out.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="markdown files (default: README, docs/)")
    ap.add_argument("--cheap", action="store_true", help="skip the runs marked slow")
    ap.add_argument("--only", help="check one run ID")
    ap.add_argument("--unmarked", action="store_true",
                    help="list the lines with figures no marker covers (runs nothing)")
    a = ap.parse_args()
    if a.unmarked:
        lines = [x for p in [p.resolve() for p in a.files] or DOCS for x in unmarked(p)]
        print("\n".join(lines))
        print(f"docs-check: {len(lines)} lines with unmarked figures", file=sys.stderr)
        return 0
    problems, n = check([p.resolve() for p in a.files] or DOCS, slow=not a.cheap, only=a.only)
    for line in problems:
        print(line)
    print(f"docs-check: {n} runs, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
