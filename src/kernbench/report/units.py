"""Figures in human units for what a person reads (stdout, summary.txt, report.html); the
raw numbers (ns, mW, pJ, bytes) stay in stats.json."""

from __future__ import annotations


def fmt_time(ns: float, digits: int = 4) -> str:
    """ns in the largest of ns / µs / ms / s that keeps the value at least 1, `digits`
    significant digits."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:.{digits}g} {unit}"
    return f"{ns:.{digits}g} ns"


def fmt_power(mw: float) -> str:
    """mW in the largest of mW / W / kW that keeps the value at least 1, four significant
    digits."""
    for scale, unit in ((1e6, "kW"), (1e3, "W")):
        if abs(mw) >= scale:
            return f"{mw / scale:.4g} {unit}"
    return f"{mw:.4g} mW"


def fmt_bytes(n: float) -> str:
    """Bytes as B / kB / MB / GB (decimal prefixes), four significant digits."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def fmt_rate(per_s: float, unit: str) -> str:
    """A rate per second, whole, with a thousands separator."""
    return f"{per_s:,.0f} {unit}/s"


def fmt_figure(x: float, decimals: int, sep: str = ",") -> str:
    """`x` with `decimals` decimals (and `sep` between thousands) when they show four
    significant digits, else to four significant digits: a low rate reads 3.746e-06, not
    0.0."""
    if x == 0 or abs(x) >= 10 ** (3 - decimals):
        return f"{x:{sep}.{decimals}f}"
    return f"{x:.4g}"
