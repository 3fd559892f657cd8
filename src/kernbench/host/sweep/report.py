"""DIR/report.html: one self-contained page (inline PNGs, a few lines of inline JS).

- a Pareto plot per cost axis that varies (MACs = PEs × array rows × cols, TCM, HBM
  bandwidth, energy when the stats carry it) with latency on the other axis; points are
  coloured by workload (model, qconfig, shapes) and each workload's front is marked;
- a sensitivity plot per swept parameter (latency of every point against its value, the
  values as evenly spaced categories; one colour and one median line per workload);
- latency and energy axes in a unit picked from their size (µs, ms; nJ, µJ, mJ).
- the table of results.csv, sortable by clicking a header.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernbench.host.sweep.results import Table, cell
from kernbench.host.sweep.runner import write_atomic

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn
    from matplotlib.figure import Figure

COST_AXES = [("macs", "MACs (PEs × array rows × cols)"), ("tcm_kib", "TCM, all PEs (KiB)"),
             ("hbm_gbs", "HBM bandwidth (GB/s)"), ("area_mm2", "die area (mm²)"),
             ("energy_pj", "energy")]
#: axes whose values are shown in a unit picked from their size: (divisor, unit), largest first
HUMAN_UNITS = {"ns": [(1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")],
               "pJ": [(1e12, "J"), (1e9, "mJ"), (1e6, "µJ"), (1e3, "nJ"), (1.0, "pJ")]}
WORKLOAD = ("model", "qconfig", "seq_len", "kv_len", "batch")
DPI = 100
SORT_JS = """
document.querySelectorAll('table.sortable th').forEach((th, i) => th.onclick = () => {
  const body = th.closest('table').tBodies[0], rows = [...body.rows];
  const dir = th.dataset.dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
  const key = r => r.cells[i].dataset.v ?? r.cells[i].textContent;
  rows.sort((a, b) => { const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    const c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
    return dir === 'asc' ? c : -c; });
  rows.forEach(r => body.appendChild(r)); });
"""


def pareto_front(pts: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (lower or equal cost and latency,
    one strictly lower), ordered by cost."""
    order = sorted(range(len(pts)), key=lambda i: (pts[i][0], pts[i][1]))
    front: list[int] = []
    best = float("inf")
    for i in order:
        if pts[i][1] < best:
            front.append(i)
            best = pts[i][1]
    return front


def _ok_rows(table: Table) -> list[dict[str, Any]]:
    return [r for r in table.rows if r.get("status") == "ok" and r.get("total_ns")]


def _workload(row: dict[str, Any], skip: str | None = None) -> str:
    """Legend label of a point's workload: `gpt2 default seq=4 kv=0 batch=1` (without the
    field `skip`: a sensitivity plot over seq_len groups the points of every length)."""
    return " ".join((f"{k}={cell(row[k])}" if k in ("seq_len", "kv_len", "batch")
                     else cell(row[k])) for k in WORKLOAD if row.get(k) is not None
                    and k != skip).replace("_len=", "=")


def human_scale(values: list[float], unit: str) -> tuple[float, str]:
    """(divisor, unit) that shows `values` (in `unit`: "ns" or "pJ") as plain numbers: the
    largest unit the largest value reaches (12 345 678 pJ → µJ), so an axis never reads
    "×1e7"; other units are returned unchanged with divisor 1."""
    top = max((abs(v) for v in values), default=0.0)
    for div, name in HUMAN_UNITS.get(unit, []):
        if top >= div:
            return div, name
    return 1.0, unit


def _plain(ax: Any, axis: str = "both") -> None:
    """No offset or scientific notation on a linear axis (the values are scaled already)."""
    ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(n: int, height: float = 3.6) -> tuple[Any, list[Any]]:
    # matplotlib is heavy and only the report needs it: imported when a plot is drawn.
    # A figure with its own Agg canvas: the global backend and pyplot stay untouched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(4.5, 4.5 * n), height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False)[0]
    return fig, list(axes)


def pareto_png(table: Table) -> str | None:
    """Base64 PNG of latency vs each varying cost axis, fronts marked; None if no data."""
    rows = _ok_rows(table)
    axes_used = [(c, t) for c, t in COST_AXES
                 if len({r.get(c) for r in rows if r.get(c) is not None}) > 1]
    if not rows:
        return None
    if not axes_used:
        axes_used = [COST_AXES[0]]
    import matplotlib.style  # heavy, only for the report (see _figure)

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_workload(r), []).append(r)
    ydiv, yunit = human_scale([float(r["total_ns"]) for r in rows], "ns")
    with matplotlib.style.context("default"):
        fig, axes = _figure(len(axes_used))
        for ax, (col, title) in zip(axes, axes_used, strict=True):
            xdiv, xunit = (human_scale([float(r[col]) for r in rows if r.get(col) is not None],
                                       "pJ") if col == "energy_pj" else (1.0, ""))
            for gi, (name, rs) in enumerate(sorted(groups.items())):
                pts = [(float(r[col]) / xdiv, float(r["total_ns"]) / ydiv) for r in rs
                       if r.get(col) is not None]
                if not pts:
                    continue
                color = f"C{gi % 10}"
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, color=color,
                           alpha=0.5, label=name)
                front = [pts[i] for i in pareto_front(pts)]
                ax.step([p[0] for p in front], [p[1] for p in front], where="post", color=color)
                ax.scatter([p[0] for p in front], [p[1] for p in front], s=60, color=color,
                           marker="*", edgecolors="black", linewidths=0.5)
            ax.set_xlabel(f"{title} ({xunit})" if xunit else title)
            ax.set_ylabel(f"latency ({yunit})")
            ax.set_title(f"Pareto: latency vs {col} (★ = front)", fontsize=10)
            _plain(ax)
            ax.grid(alpha=0.3)
        if len(groups) > 1:
            axes[0].legend(fontsize=7)
        return _png(fig)


def _categories(rows: list[dict[str, Any]], key: str) -> list[str]:
    """The values of `key` as axis categories: ascending when all are numbers, else in the
    order the points list them (the spec's order)."""
    vals = list(dict.fromkeys(cell(r[key]) for r in rows))
    if all(isinstance(r[key], int | float) and not isinstance(r[key], bool) for r in rows):
        by_text = {cell(r[key]): float(r[key]) for r in rows}
        vals.sort(key=lambda v: by_text[v])
    return vals


def sensitivity_series(table: Table, key: str
                       ) -> tuple[list[str], dict[str, dict[int, list[float]]]]:
    """(the categories of `key`, workload → category index → latencies in ns) of the
    finished points; a workload is the model, qconfig and shapes other than `key`."""
    rows = [r for r in _ok_rows(table) if r.get(key) is not None]
    cats = _categories(rows, key) if rows else []
    pos = {v: i for i, v in enumerate(cats)}
    series: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        by = series.setdefault(_workload(r, skip=key), {})
        by.setdefault(pos[cell(r[key])], []).append(float(r["total_ns"]))
    return cats, series


def sensitivity_png(table: Table, key: str) -> str | None:
    """Base64 PNG of latency against one swept parameter; None if no finished point.

    The parameter's values are categories (a sweep's values are a list, not a continuum),
    evenly spaced and labelled with the values. Each workload (model, qconfig and shapes
    other than `key`) has its own colour, points and median line: workloads of different
    size are never pooled into one median."""
    cats, series = sensitivity_series(table, key)
    if not series:
        return None
    import matplotlib.style  # heavy, only for the report (see _figure)

    div, unit = human_scale([y for by in series.values() for ys in by.values() for y in ys],
                            "ns")
    with matplotlib.style.context("default"):
        fig, (ax,) = _figure(1, 3.2)
        n = len(series)
        for gi, (name, by_ns) in enumerate(sorted(series.items())):
            shift = (gi - (n - 1) / 2) * min(0.3, 0.6 / n)  # side by side within a category
            by = {x: [y / div for y in ys] for x, ys in by_ns.items()}
            color = f"C{gi % 10}"
            xs = sorted(by)
            ax.scatter([x + shift for x in xs for _ in by[x]], [y for x in xs for y in by[x]],
                       s=16, alpha=0.5, color=color)
            ax.plot([x + shift for x in xs], [sorted(by[x])[len(by[x]) // 2] for x in xs],
                    "-o", ms=4, color=color, label=f"{name} (median)" if name else "median")
        ax.set_xticks(range(len(cats)), cats, fontsize=8)
        ax.set_xlim(-0.5, len(cats) - 0.5)
        _plain(ax, "y")
        ax.set_xlabel(key)
        ax.set_ylabel(f"latency ({unit})")
        ax.set_title(f"sensitivity: {key}", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
        return _png(fig)


def latency_throughput_png(table: Table) -> str | None:
    """A load sweep: p99 TTFT and p99 TPOT against the achieved output tokens/s, one line
    per workload and policy, points in rate order (None without serve rows)."""
    rows = [r for r in table.rows if r.get("status") == "ok"
            and r.get("output_tokens_per_s") is not None]
    if not rows:
        return None
    import matplotlib.style  # heavy, only for the report (see _figure)

    with matplotlib.style.context("default"):
        return _png(latency_throughput_figure(rows))


def latency_throughput_figure(rows: list[dict[str, Any]]) -> Figure:
    """The figure of `latency_throughput_png` for its rows, the legend below the plots."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{_workload(r)} {r['policy']}", []).append(r)
    fig, axes = _figure(2)
    for ax, (col, name) in zip(axes, (("ttft_p99_s", "TTFT p99 (s)"),
                                      ("tpot_p99_s", "TPOT p99 (s)")), strict=True):
        for label, rs in groups.items():
            pts = [(float(r["output_tokens_per_s"]), float(r[col]))
                   for r in sorted(rs, key=lambda r: float(r["rate"]))
                   if r.get(col) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xlabel("throughput (output tokens/s)")
        ax.set_ylabel(name)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    # below both plots, outside them: a legend inside covers the curves' points
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", fontsize=7,
               ncols=min(len(labels), 3))
    return fig


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for r in table.rows:
        tds = []
        for c in table.columns:
            text = cell(r.get(c))
            if c == "id":
                tds.append(f'<td data-v="{text}" title="{text}">{text[:12]}</td>')
            else:
                cls = ' class="err"' if c == "error" and text else ""
                tds.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def render(table: Table, title: str) -> str:
    """The whole page as a string."""
    n_ok = sum(r["status"] == "ok" for r in table.rows)
    n_err = sum(r["status"] == "error" for r in table.rows)
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{len(table.rows)} points: {n_ok} ok, {n_err} failed, "
             f"{len(table.rows) - n_ok - n_err} pending.</p>"]
    png = pareto_png(table)
    if png:
        parts.append(f'<h2>Pareto front</h2><img alt="pareto" src="data:image/png;base64,{png}">')
    lt = latency_throughput_png(table)
    if lt:
        parts.append("<h2>Latency against throughput</h2>"
                     f'<img alt="latency against throughput" src="data:image/png;base64,{lt}">')
    sens = [(k, sensitivity_png(table, k)) for k in table.swept]
    if any(p for _, p in sens):
        parts.append("<h2>Sensitivity</h2>")
        parts += [f'<img alt="sensitivity {html.escape(k)}" src="data:image/png;base64,{p}">'
                  for k, p in sens if p]
    parts.append("<h2>Points</h2><p>Click a column header to sort.</p>" + _table_html(table))
    style = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
             "font-size:12px}th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "th{cursor:pointer;background:#f0f0f0;position:sticky;top:0}td.err{color:#b00;"
             "text-align:left}img{max-width:100%;display:block;margin:0.5em 0}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body>{''.join(parts)}"
            f"<script>{SORT_JS}</script></body></html>\n")


def write_report(table: Table, path: Path, title: str = "kernbench sweep") -> Path:
    write_atomic(Path(path), render(table, title))
    return Path(path)
