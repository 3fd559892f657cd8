"""The serving section of a report (`kernbench serve`, docs/serving.md): headline cards,
the latency percentiles, the latency CDFs (TTFT, TPOT, end-to-end) and the KV-cache
occupancy over time. Plain data in (the `serve` stats and the per-request latencies),
one self-contained HTML page out, byte-identical for the same inputs (plots.py's PNGs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kernbench.report.html import _CSS, _card, _e, _img, _table
from kernbench.report.plots import _new_figure, _png
from kernbench.report.units import fmt_figure, fmt_time

MAX_POINTS = 4000  # per plotted line: the occupancy series is thinned to this many


def _cdf_fig(lat: dict[str, list[float]]) -> Any:
    fig = _new_figure(12.0, 3.4)
    axes = fig.subplots(1, len(lat))
    for ax, (name, vals) in zip(np.atleast_1d(axes), lat.items(), strict=True):
        if vals:
            x = np.sort(np.asarray(vals, dtype=np.float64))
            y = np.arange(1, len(x) + 1) / len(x)
            step = max(1, len(x) // MAX_POINTS)
            ax.step(x[::step], y[::step], where="post", color="#1f77b4")
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3))
        ax.set_title(name)
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


#: below this peak fraction the occupancy plot's axis ends at the peak, not at 1: a small
#: model in a large HBM fills a sliver of its cache, and a line along 0 shows nothing
ZOOM_BELOW = 0.2


def _occupancy_fig(t_s: list[float], fraction: list[float]) -> Any:
    if not t_s:
        return None
    fig = _new_figure(12.0, 3.0)
    ax = fig.subplots()
    step = max(1, len(t_s) // MAX_POINTS)
    ax.step(t_s[::step], fraction[::step], where="post", color="#d62728")
    ax.set_xlabel("time (s)")
    peak = max(fraction)
    if 0 < peak < ZOOM_BELOW:
        ax.set_ylim(0, 1.25 * peak)
        ax.set_ylabel("KV blocks used (fraction;\naxis up to the peak)")
    else:
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("KV blocks used (fraction)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def _share(fraction: float) -> str:
    """A share of the KV cache as a percentage that is not 0.0 % unless it is 0."""
    if fraction == 0 or fraction >= 1e-3:
        return f"{100 * fraction:.1f} %"
    return f"{100 * fraction:.2g} %"


#: an SLO is shown with every digit the user gave (two objectives a nanosecond apart
#: must not print alike)
SLO_DIGITS = 12


def _t(seconds: float) -> str:
    """A latency with a unit that suits its size."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{1e3 * seconds:.3g} ms"
    return f"{1e6 * seconds:.3g} µs"


def _pct_row(name: str, d: dict[str, Any], scale: float) -> str:
    cells = "".join(f'<td class="n">{"–" if d.get(k) is None else f"{scale * d[k]:.3f}"}</td>'
                    for k in ("p50", "p90", "p99", "mean", "max"))
    return f"<tr><td>{_e(name)}</td>{cells}</tr>"


def serving_html(title: str, serve: dict[str, Any], latencies: dict[str, list[float]],
                 occupancy: tuple[list[float], list[float]]) -> str:
    """The page: `serve` is stats.json's `serve` section, `latencies` seconds per request
    by name (TTFT, TPOT, end-to-end), `occupancy` (times in s, fraction of KV blocks)."""
    r = serve["results"]
    th = r["throughput"]
    cards = [_card("requests", str(r["requests"]), f"over {_t(r['span_s'])}"),
             _card("TTFT p99", _t(r["ttft_s"]["p99"]), f"p50 {_t(r['ttft_s']['p50'])}"),
             _card("throughput", f"{fmt_figure(th['output_tokens_per_s'], 0)} output tok/s",
                   f"{fmt_figure(th['requests_per_s'], 3, '')} requests/s"),
             _card("KV cache peak", _share(r["kv_occupancy"]["peak_fraction"]),
                   f"{r['kv_occupancy']['peak_blocks']:,} of "
                   f"{r['kv_occupancy']['blocks']:,} blocks"),
             _card("preemptions", str(r["preemptions"]),
                   f"{r['preempted_requests']} requests")]
    if r["tpot_s"]["p99"] is not None:
        cards.insert(2, _card("TPOT p99", _t(r["tpot_s"]["p99"]),
                              f"p50 {_t(r['tpot_s']['p50'])}"))
    if "goodput" in r:
        g = r["goodput"]
        slo = ", ".join(f"{k} ≤ {fmt_time(v * 1e9, SLO_DIGITS)}" for k, v in g["slo_s"].items())
        cards.append(_card("goodput", f"{fmt_figure(g['requests_per_s'], 3, '')} req/s",
                           f"{100 * g['fraction']:.1f} % meet {slo}"))
    if "chips" in serve:  # disaggregated: the pools and the KV sends between them
        c = serve["chips"]
        sends = c["kv_transfer"].get("sends") or []
        rate = (f"KV sends at {min(x['gb_per_s'] for x in sends):.3g}–"
                f"{max(x['gb_per_s'] for x in sends):.3g} GB/s" if sends else "no KV send")
        cards.append(_card("chips", f"{c['prefill']} prefill + {c['decode']} decode", rate))
    unit, scale = ("ms", 1e3) if r["e2e_s"]["max"] >= 1e-3 else ("µs", 1e6)
    rows = [_pct_row("TTFT", r["ttft_s"], scale), _pct_row("TPOT", r["tpot_s"], scale),
            _pct_row("end-to-end", r["e2e_s"], scale)]
    cfg = (f"{_e(serve['model'])} on {_e(serve['topology'])}, policy "
           f"<code>{_e(serve['policy'])}</code>, {_e(serve['workload']['describe'])}")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", f'<p class="sub">{cfg}</p>',
             '<div class="cards">' + "".join(cards) + "</div>",
             f"<h2>Serving latencies ({unit})</h2>",
             _table(["", "p50", "p90", "p99", "mean", "max"], rows, {1, 2, 3, 4, 5})]
    cdf = _png(_cdf_fig, latencies)
    if cdf:
        parts.append("<h3>Latency CDFs</h3>" + _img(cdf, "latency CDFs"))
    occ = _png(_occupancy_fig, *occupancy)
    if occ:
        parts.append("<h3>KV-cache occupancy</h3>" + _img(occ, "KV-cache occupancy"))
    st = serve["steps"]
    parts.append(f'<p class="note">{st["count"]:,} step{"s" * (st["count"] != 1)}; step '
                 f"times from {st['programs']} simulated program"
                 f"{'s' * (st['programs'] != 1)} "
                 f"({'every shape simulated' if st['exact'] else 'bucketed, interpolated'}). "
                 "requests.csv, occupancy.csv, trace.json (ui.perfetto.dev: one track per "
                 "request) · docs/serving.md · generated by kernbench</p></body></html>")
    return "\n".join(parts) + "\n"


def write_serving_report(path: Path, title: str, serve: dict[str, Any],
                         latencies: dict[str, list[float]],
                         occupancy: tuple[list[float], list[float]]) -> Path:
    page = serving_html(title, serve, latencies, occupancy)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8", newline="\n")
    tmp.replace(path)
    return path


def serve_lines(r: dict[str, Any]) -> list[str]:
    """A serving run's result on stdout (stats.json's `serve.results`, in human units):
    the TTFT, TPOT and end-to-end percentiles, the throughput and the goodput."""
    lines = []
    for key, name in (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                      ("e2e_s", "end to end")):
        d = r[key]
        lines.append(f"{name}: " + ", ".join(
            f"{k} {'–' if v is None else fmt_time(v * 1e9)}" for k, v in d.items()))
    t = r["throughput"]
    lines.append(f"throughput: {fmt_figure(t['requests_per_s'], 1)} requests/s, "
                 f"{fmt_figure(t['output_tokens_per_s'], 0)} output tokens/s, "
                 f"{fmt_figure(t['tokens_per_s'], 0)} tokens/s")
    g = r.get("goodput")
    if g:
        n = g["requests"]
        lines.append(f"goodput: {n} request{'' if n == 1 else 's'} ({100 * g['fraction']:.1f} "
                     "%) met "
                     + ", ".join(f"{k} ≤ {fmt_time(v * 1e9, SLO_DIGITS)}"
                                 for k, v in g["slo_s"].items())
                     + f", {fmt_figure(g['requests_per_s'], 1)} requests/s")
    return lines
