"""Comments, docstrings and schema descriptions say what and why in the present tense: the
history of a decision (its ADR number, what it measured) lives in docs/adr/ and
docs/performance.md, not in src/ or schemas/. Checked on every comment and string token of
src/kernbench and every JSON schema in schemas/."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kernbench"
ADR = re.compile(r"ADR-\d{3,4}")
#: a number followed by a time unit: a measured duration (not `1e-3 ns`, a rounding unit)
FIGURE = re.compile(r"(?<![\w.\-])\d+(?:\.\d+)?\s?(?:µs|us|ns)\b")


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal of a Python file."""
    toks = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [(t.start[0], t.string) for t in toks if t.type in (tokenize.COMMENT, tokenize.STRING)]


def _offences(pattern: re.Pattern[str]) -> list[str]:
    bad = [f"{f.relative_to(ROOT)}:{line}: {m.group(0)}"
           for f in sorted(SRC.rglob("*.py")) for line, text in _texts(f)
           for m in pattern.finditer(text)]
    for f in sorted((ROOT / "schemas").glob("*.json")):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            bad += [f"{f.relative_to(ROOT)}:{i}: {m.group(0)}" for m in pattern.finditer(line)]
    return bad


def test_no_adr_number_in_code_or_schemas():
    assert _offences(ADR) == []


def test_no_measured_duration_in_comments_or_descriptions():
    assert _offences(FIGURE) == []


def test_the_patterns_catch_history():
    assert ADR.search("tiled by rows (ADR-0706)")
    assert FIGURE.search("decode 176.1 µs, 2 gives 178.7") and FIGURE.search("took 552 ns")
    assert FIGURE.search("(116.8 -> 118.0 us)")
    assert not FIGURE.search("times in ns rounded to 1e-3 ns") and not FIGURE.search("t_ns")
