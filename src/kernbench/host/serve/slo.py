"""`--slo ttft=1s,tpot=50ms`: latency objectives a request must meet to count as goodput.

Keys: `ttft` (time to first token), `tpot` (time per output token after the first) and
`e2e` (arrival to last token), in any case; values a number with a unit `s`, `ms`, `us`
(or `µs`, as the tool prints it) or `ns`; spaces around `=` and before the unit are
allowed. A limit is at least one nanosecond: the served times are whole nanoseconds.
Anything else, an empty text or item included, is one InputError line naming `--slo`.
"""

from __future__ import annotations

import math
import re

from kernbench.errors import InputError

KEYS = ("ttft", "tpot", "e2e")
#: ns per unit; µs written with the micro sign or the Greek mu, as the tool prints it
_UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "\u00b5s": 1e3, "\u03bcs": 1e3, "ns": 1.0}
# a number as a trace's cells take it (`5`, `5.`, `.5`, `5e-3`)
_NUMBER = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_ITEM = re.compile(r"^([A-Za-z0-9]+)\s*=\s*(" + _NUMBER + r")\s*("
                   + "|".join(sorted(_UNITS, key=len, reverse=True)) + ")$", re.ASCII)


def parse_slo(text: str | None) -> dict[str, float]:
    """{key: limit in ns}; {} when `text` is None (no objective)."""
    out: dict[str, float] = {}
    if text is None:
        return out
    if not text.strip():
        raise InputError("is empty: give KEY=VALUEUNIT,... (e.g. ttft=1s,tpot=50ms) or leave "
                         "it out", field="--slo")
    for item in text.split(","):
        if not item.strip():
            raise InputError(f"an empty item in '{text}': give KEY=VALUEUNIT items separated "
                             "by single commas (e.g. ttft=1s,tpot=50ms)", field="--slo")
        m = _ITEM.match(item.strip())
        if not m or m.group(1).lower() not in KEYS:
            raise InputError(f"'{item.strip()}' is not KEY=VALUEUNIT with KEY in "
                             f"{', '.join(KEYS)} and UNIT in s, ms, us (µs), ns "
                             "(e.g. ttft=1s,tpot=50ms)", field="--slo")
        key, v = m.group(1).lower(), float(m.group(2)) * _UNITS[m.group(3)]
        if key in out:
            raise InputError(f"'{key}' given twice", field="--slo")
        if not (math.isfinite(v) and v > 0):
            raise InputError(f"'{item.strip()}' must be a positive, finite time",
                             field="--slo")
        if v < 1.0:
            raise InputError(f"'{item.strip()}' is under one nanosecond, which no served "
                             "time can meet (times are whole nanoseconds)", field="--slo")
        out[key] = v
    return out


def meets(slo: dict[str, float], ttft_ns: int, tpot_ns: float | None, e2e_ns: int) -> bool:
    """True when a request meets every objective (a one-token request has no TPOT)."""
    vals = {"ttft": ttft_ns, "tpot": tpot_ns, "e2e": e2e_ns}
    return all(vals[k] is None or vals[k] <= lim for k, lim in slo.items())
