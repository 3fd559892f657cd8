"""The requests a serving run receives: Poisson arrivals with drawn lengths, or a trace.

`LengthSpec.parse(text)` reads a length option: `512` (fixed), `128:2048` or
`uniform:128:2048` (uniform over the integers, both ends included) or
`lognormal:MEDIAN:SIGMA[:MAX]` (round(MEDIAN × exp(SIGMA × N(0, 1))), clamped to [1, MAX];
MEDIAN any real from 1). `poisson_requests` draws arrivals with
exponential gaps of mean 1/RATE and the lengths, all from one `random.Random(seed)`, in a
fixed order (gap, prompt, output per request), so a seed gives the same requests on any
machine. `read_trace` reads a CSV whose header names the columns `arrival_s`,
`prompt_tokens` and `output_tokens` (any order and case; other columns are ignored;
docs/serving.md); a negative, non-finite or decreasing time or a length below 1 is an
`InputError` naming the file, the line and the field, and so is a time beyond
`MAX_TIME_S` (a run's times are integer nanoseconds and must stay within 64 bits; a
UTF-8 byte-order mark before the header, as spreadsheet programs write, is skipped).
Lines may end in LF, CRLF or CR alone; a file the csv module cannot split (a field
longer than its limit) is an `InputError` naming the line. A cell is a number written in
ASCII (`_NUMBER`: digits, an optional fraction and exponent); the token counts take an
integral decimal as spreadsheet exports write it (`512.0`, `5.12e2`).

Times are integer nanoseconds from here on: every later sum is exact.
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
#: the latest arrival a run takes, in seconds (about 32 years): its times, in integer
#: nanoseconds, then stay far within 64 bits
MAX_TIME_S = 1e9
#: the most requests a run takes (its request list and per-request outputs stay within a
#: few hundred MB of host memory)
MAX_REQUESTS = 1_000_000
#: a number in a trace cell: float() and int() also take `1_000`, digits of other scripts
#: and (float) nan or inf, which no trace means as a time or a token count
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (ns), its prompt and how many tokens it generates."""

    id: int
    arrival_ns: int
    prompt: int
    output: int
    where: str = ""  # for error lines: "line 5" of a trace, "request 3" when drawn


@dataclass(frozen=True)
class LengthSpec:
    """How token counts are drawn: kind "fixed" (lo), "uniform" (lo..hi) or "lognormal"
    (median lo, sigma, clamped to hi)."""

    kind: str
    lo: int
    hi: int = 0
    sigma: float = 0.0
    text: str = ""
    median: float = 0.0  # lognormal: the median (any real >= 1; `lo` is it rounded up)

    @staticmethod
    def parse(text: str, option: str) -> LengthSpec:
        """A length option's text → LengthSpec; InputError (naming `option`) otherwise."""
        t = text.strip()
        try:
            if t.startswith("uniform:"):
                t = t[len("uniform:"):]
            if t.startswith("lognormal:"):
                parts = t.split(":")[1:]
                if len(parts) not in (2, 3):
                    raise ValueError
                med, sigma = float(parts[0]), float(parts[1])
                hi = _whole(parts[2]) if len(parts) == 3 else 0
                rule = ("1 <= MEDIAN < 1e15" if not 1 <= med < 1e15 else "0 <= SIGMA < 10"
                        if not 0 <= sigma < 10 else "MAX >= MEDIAN"
                        if len(parts) == 3 and hi < med else None)
                if rule is not None:
                    raise InputError(f"'{text}': lognormal:MEDIAN:SIGMA[:MAX] needs {rule}",
                                     field=option)
                return LengthSpec("lognormal", math.ceil(med), hi, sigma, t, med)
            if ":" in t:
                a, b = (_whole(x) for x in t.split(":"))
                if a < 1 or b < a:
                    raise ValueError
                return LengthSpec("uniform", a, b, text=t)
            n = _whole(t)
            if n < 1:
                raise ValueError
            return LengthSpec("fixed", n, n, text=t)
        except ValueError:
            raise InputError(f"'{text}' is not a length: give N, LO:HI (whole numbers, 1 <= LO "
                             "<= HI) or lognormal:MEDIAN:SIGMA[:MAX] (MAX whole)",
                             field=option) from None

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.lo
        if self.kind == "uniform":
            return rng.randint(self.lo, self.hi)
        x = round((self.median or self.lo) * math.exp(self.sigma * rng.gauss(0.0, 1.0)))
        return max(1, min(x, self.hi) if self.hi else x)

    def largest(self) -> int | None:
        """The largest value a draw can take (None: unbounded lognormal)."""
        if self.kind == "lognormal":
            return self.hi or None
        return self.hi


def poisson_requests(n: int, rate: float, prompt: LengthSpec, output: LengthSpec,
                     seed: int) -> list[Request]:
    """`n` requests with Poisson arrivals of `rate` per second (the first at its first
    gap, not at 0)."""
    if not 1 <= n <= MAX_REQUESTS:
        raise InputError(f"must be 1..{MAX_REQUESTS:,}, got {n:,}", field="--requests")
    if not (rate > 0 and math.isfinite(rate)):
        raise InputError(f"must be a positive number, got {rate}", field="--rate")
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(rate)
        if t > MAX_TIME_S:
            raise InputError(f"request {i} would arrive at {t:.3g} s, beyond {MAX_TIME_S:g} s "
                             "(raise --rate or lower --requests)", field="--rate")
        out.append(Request(i, round(t * 1e9), prompt.draw(rng), output.draw(rng),
                           f"request {i}"))
    return out


def _csv_rows(text: str, file: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each CSV record of `text`; a record the csv module cannot
    read is an InputError naming its line, never a traceback."""
    # newline="" lets the reader end a record at LF, CRLF or a lone CR
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise InputError(f"not readable as CSV: {e}", file=file,
                             where=f"line {reader.line_num}") from None
        yield reader.line_num, row


def _whole(text: str) -> int:
    """A length option's number: what `int` reads, or an integral decimal as a trace's
    cell may be (`512.0`, `5.12e2`); ValueError otherwise."""
    try:
        return int(text)
    except ValueError:
        n = _count(text)
        if n is None:
            raise
        return n


def _count(cell: str) -> int | None:
    """A token-count cell's integer: `512`, or an integral decimal (`512.0`, `5.12e2`);
    None for anything else."""
    t = cell.strip()
    if not _NUMBER.fullmatch(t):
        return None
    d = Decimal(t)
    # int() refuses more than 4300 digits too; an exponent beyond would build a huge int
    if d.adjusted() >= 4300 or d != d.to_integral_value():
        return None
    return int(d)


def _columns(header: list[str] | None, file: str, line: int) -> list[int]:
    """Where each of TRACE_COLUMNS is in `header` (at `line`; None: the file has no
    line that is not blank): found by name (any case, any order); other columns (a
    request id, a user) are ignored."""
    names = [h.strip().lower() for h in header or ()]
    missing = [c for c in TRACE_COLUMNS if c not in names]
    twice = sorted({c for c in TRACE_COLUMNS if names.count(c) > 1})
    if missing or twice:
        got = ",".join(header) if header is not None else "an empty file"
        why = (f"column {twice[0]} appears twice" if twice else
               f"it has no column {', '.join(missing)}")
        raise InputError(f"the header must name the columns {','.join(TRACE_COLUMNS)} "
                         f"(in any order; others are ignored): {why} (got {got})", file=file,
                         where=f"line {line}")
    return [names.index(c) for c in TRACE_COLUMNS]


def read_trace(path: Path) -> list[Request]:
    """The requests of a trace CSV (see the module docstring)."""
    file = str(path)
    text = read_input_text(Path(path), MAX_JSON_BYTES).removeprefix("\ufeff")
    rows = _csv_rows(text, file)
    head_line, header = 1, None
    for line, raw in rows:  # blank lines before the header are skipped, as after it
        if raw and any(c.strip() for c in raw):
            head_line, header = line, raw
            break
    cols = _columns(header, file, head_line)
    width = len(header or ())
    out: list[Request] = []
    last = 0
    for line, raw in rows:
        if not raw or all(not c.strip() for c in raw):
            continue
        where = f"line {line}"
        if len(raw) != width:
            raise InputError(f"{len(raw)} fields, expected {width} (as the header has)",
                             file=file, where=where)
        row = [raw[k] for k in cols]
        if not _NUMBER.fullmatch(row[0].strip()):
            raise InputError(f"'{row[0]}' is not a number", file=file, where=where,
                             field="arrival_s")
        t = float(row[0])  # _NUMBER admits no nan: only an overflow is not finite
        if t < 0:
            raise InputError(f"{row[0].strip()} is not a time >= 0", file=file, where=where,
                             field="arrival_s")
        if t > MAX_TIME_S:
            raise InputError(f"{row[0].strip()} is beyond {MAX_TIME_S:g} s, the latest arrival "
                             "a run takes", file=file, where=where, field="arrival_s")
        # from the decimal text, not the float: a 9-decimal arrival beyond about 9e6 s has
        # more digits than a float holds (half-even, like round() of the float)
        ns = round(Decimal(row[0].strip()) * 10**9)
        if ns < last:
            raise InputError(f"{row[0].strip()} is earlier than the line before (times must "
                             "not decrease)", file=file, where=where, field="arrival_s")
        last = ns
        lens = []
        for name, cell in zip(TRACE_COLUMNS[1:], row[1:], strict=True):
            v = _count(cell)
            if v is None:
                raise InputError(f"'{cell}' is not an integer", file=file, where=where,
                                 field=name)
            if v < 1:
                raise InputError(f"must be >= 1, got {v}", file=file, where=where, field=name)
            lens.append(v)
        if len(out) == MAX_REQUESTS:
            raise InputError(f"more than {MAX_REQUESTS:,} requests, the most a run takes",
                             file=file, where=where)
        out.append(Request(len(out), ns, lens[0], lens[1], where))
    if not out:
        raise InputError("no requests (only a header)", file=file)
    return out
