"""The one-page HTML report of a run (docs/report.md).

A single self-contained file: inline CSS, PNG plots embedded as base64 data URIs, no
scripts and no external assets, so it opens offline in any browser and can be mailed or
attached to a CI run. All text from the run (ids, op names, file names) is HTML-escaped.
The page holds no timestamps or host details: the same inputs give a byte-identical file.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernbench.report import energy_plots, plots
from kernbench.report.energy import fmt_energy
from kernbench.report.llm import llm_html
from kernbench.report.result_text import layer_legend, precision_line
from kernbench.report.units import fmt_power, fmt_time
from kernbench.topology.model import Topology
from kernbench.topology.peaks import hbm_gbs

MAX_LAYER_ROWS = 25
MAX_ENGINE_ROWS = 32
MAX_IO_ROWS = 12

_CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1240px;padding:0 16px;color:#1d2330;background:#fff;font-size:14px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #dde2ec;padding-bottom:4px}
.sub{color:#5a6478;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #dde2ec;border-radius:6px;padding:8px 12px;min-width:150px;
background:#f7f9fc}
.card .k{font-size:11px;color:#5a6478;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:18px;font-weight:600;margin-top:2px}
.card .d{font-size:12px;color:#5a6478}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{padding:3px 10px;border-bottom:1px solid #e8ebf2;text-align:left;white-space:nowrap}
th{background:#f0f3f8;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#17803d;font-weight:600}.bad{color:#c0262d;font-weight:600}
.note{color:#5a6478;font-size:12px;margin:2px 0 8px}
img{max-width:100%;border:1px solid #e8ebf2;margin:6px 0}
code{background:#f0f3f8;padding:0 3px;border-radius:3px}
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float | int | None, digits: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def _pct(u: float | None) -> str:
    return "–" if u is None else f"{100.0 * u:.1f}%"


def _bar_cell(u: float | None) -> str:
    """A right-aligned % cell with a light bar behind it (pure CSS)."""
    if u is None:
        return '<td class="n">–</td>'
    w = max(0.0, min(100.0, 100.0 * u))
    return (f'<td class="n" style="background:linear-gradient(90deg,#cfe0fb {w:.1f}%,'
            f'transparent {w:.1f}%)">{_pct(u)}</td>')


def _table(head: list[str], rows: list[str], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    th = "".join(f'<th class="n">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                 for i, h in enumerate(head))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _card(key: str, value: str, detail: str = "") -> str:
    d = f'<div class="d">{_e(detail)}</div>' if detail else ""
    return (f'<div class="card"><div class="k">{_e(key)}</div>'
            f'<div class="v">{_e(value)}</div>{d}</div>')


def _topology_text(stats: dict[str, Any], topology: Topology) -> str:
    name = str(stats.get("topology", "?"))
    if topology is None:
        return name
    try:
        g = topology.config.cube.pe_template.pe_gemm
        bw = hbm_gbs(topology)
        return (f"{name}: {len(topology.pes)} PEs in {len(topology.cubes)} cube(s), "
                f"{g.rows}×{g.cols} arrays @ {g.clock_ghz:g} GHz, HBM {bw:,.0f} GB/s")
    except AttributeError:
        return name


# ---------------------------------------------------------------------------- sections
def _headline(stats: dict[str, Any], topology: Topology) -> str:
    cards = [
        _card("total time", fmt_time(stats.get("total_ns") or 0.0)),
        _card("cycles", _num(stats.get("total_cycles")),
              f"@ {stats.get('clock_ghz', 0):g} GHz"),
        _card("commands", _num(stats.get("commands_completed"))),
    ]
    if stats.get("estimate_ns"):
        cards.append(_card("cost-model estimate", fmt_time(stats["estimate_ns"]),
                           f"{stats['estimate_ns'] / stats['total_ns']:.2f} × total"
                           if stats.get("total_ns") else ""))
    b = stats.get("bottleneck") or {}
    if b.get("component"):
        cards.append(_card("bottleneck", f"{b.get('bound_by')}-bound",
                           f"{b['component']} ({b.get('kind', '')}) "
                           f"{_pct(b.get('utilization'))} busy"))
    if stats.get("precision"):
        cards.append(_card("precision", stats["precision"]["source"],
                           precision_line(stats["precision"]).split(": ", 1)[1]))
    if "roofline_fraction" in stats:
        mb = stats.get("model_bound") or {}
        cards.append(_card("roofline fraction", f"{stats['roofline_fraction']:.3f}",
                           "Σ per-layer roofline bounds / total; Σ compute "
                           f"{fmt_time(mb.get('compute_bound_ns', 0.0))}, Σ memory "
                           f"{fmt_time(mb.get('memory_bound_ns', 0.0))}"))
    en = stats.get("energy")
    if en:
        per = (f"{fmt_energy(en['per_token_pj'])} per token" if en.get("tokens")
               else f"dynamic {fmt_energy(en['dynamic_pj'])}")
        cards.append(_card("energy", fmt_energy(en["total_pj"]), per))
        cards.append(_card("average power", fmt_power(en["average_power_mw"]),
                           f"{en['tops_per_w']:.3f} TOPS/W"))
    area = stats.get("area_mm2")
    if area:
        cards.append(_card("die area", f"{area['total']:,.2f} mm²",
                           f"{len(area.get('per_cube', {}))} cube(s)"))
    crit = stats.get("critical_path")
    if crit:
        cards.append(_card("critical path", f"{len(crit):,} entries"))
    k = stats.get("kernel")
    if isinstance(k, dict) and k.get("name"):
        cards.append(_card("kernel", str(k["name"])))
    return (f'<p class="sub">topology {_e(_topology_text(stats, topology))}</p>'
            f'<div class="cards">{"".join(cards)}</div>')


def _verdict_section(v: Mapping[str, Any]) -> str:
    ok = bool(v.get("ok"))
    status = '<span class="ok">PASS</span>' if ok else '<span class="bad">FAIL</span>'
    out = [f"<h2>Verification: {status}</h2>"]
    if v.get("mode"):
        out.append(f'<p class="note">precision mode {_e(v["mode"])}</p>')
    if v.get("error"):
        out.append(f'<p class="bad">error: {_e(v["error"])}</p>')
    rows = []
    for c in v.get("checks") or []:
        good = bool(c.get("ok"))
        cos, err = c.get("cosine"), c.get("max_abs_err")
        rows.append(
            f"<tr><td>{_e(c.get('output', ''))}</td><td>{_e(c.get('reference', ''))}</td>"
            f'<td class="n">{_e(f"{err:.3g}" if isinstance(err, int | float) else err)}</td>'
            f'<td class="n">{_e(f"{cos:.6f}" if isinstance(cos, int | float) else cos)}</td>'
            f"<td>{_e(c.get('threshold', ''))}</td>"
            f'<td class="{"ok" if good else "bad"}">{"ok" if good else "FAIL"}</td></tr>')
    if rows:
        out.append(_table(["output", "reference", "max abs err", "cosine", "threshold", ""],
                          rows, {2, 3}))
    fd = v.get("first_divergence")
    if fd:
        what = fd.get("layer", fd) if isinstance(fd, dict) else fd
        op = f" ({fd['op_type']})" if isinstance(fd, dict) and fd.get("op_type") else ""
        out.append(f'<p class="bad">first diverging layer: {_e(what)}{_e(op)}</p>')
    return "".join(out)


def _layers_section(stats: dict[str, Any]) -> str:
    layers = stats.get("layers") or {}
    if not layers:
        return ""
    ordered = sorted(layers.items(), key=lambda kv: (-kv[1].get("ns", 0.0), kv[0]))
    rows = []
    for lid, v in ordered[:MAX_LAYER_ROWS]:
        frac = v.get("roofline_fraction")
        rows.append(
            f"<tr><td>{_e(lid)}</td><td>{_e(v.get('op_type', ''))}</td>"
            f'<td class="n">{_num(v.get("ns"))}</td><td class="n">{_num(v.get("estimate_ns"))}</td>'
            f'<td class="n">{_num(v.get("busy_ns"))}</td>'
            f'<td class="n">{_num(v.get("estimate_busy_ns"))}</td>'
            f'<td class="n">{_num(v.get("bound_ns"))}</td>'
            f'<td class="n">{_e(f"{frac:.3f}" if frac is not None else "–")}</td>'
            f"<td>{_e(v.get('bound_by', ''))}</td><td>{_e(v.get('bottleneck') or '–')}</td>"
            f'<td class="n">{_num(v.get("macs"))}</td><td class="n">{_num(v.get("bytes"))}</td>'
            "</tr>")
    note = (f'<p class="note">{len(layers) - MAX_LAYER_ROWS} more layers in stats.json</p>'
            if len(layers) > MAX_LAYER_ROWS else "")
    legend = "".join(f"<li>{_e(line)}</li>" for line in layer_legend(stats))
    return ("<h2>Layers (slowest first)</h2>"
            f'<ul class="note">{legend}</ul>'
            + _table(["layer", "op_type", "ns", "estimate_ns", "busy_ns", "estimate_busy_ns",
                      "bound_ns", "roofline_fraction", "bound_by", "bottleneck", "macs",
                      "bytes"], rows, {2, 3, 4, 5, 6, 7, 10, 11}) + note)


def _engines_section(stats: dict[str, Any]) -> str:
    engines = stats.get("engines") or {}
    if not engines:
        return ""
    ordered = sorted(engines.items(), key=lambda kv: (-kv[1].get("utilization", 0.0), kv[0]))
    rows = []
    for cid, e in ordered[:MAX_ENGINE_ROWS]:
        chans = e.get("channels") or {}
        ch = " · ".join(f"{name} {_pct(c.get('utilization'))}" for name, c in sorted(chans.items()))
        rows.append(f"<tr><td>{_e(cid)}</td><td>{_e(e.get('kind', ''))}</td>"
                    f'<td class="n">{_num(e.get("busy_ns"))}</td>{_bar_cell(e.get("utilization"))}'
                    f'<td class="n">{_num(e.get("ops"))}</td><td>{_e(ch)}</td></tr>')
    note = (f'<p class="note">{len(engines) - MAX_ENGINE_ROWS} more engines in stats.json</p>'
            if len(engines) > MAX_ENGINE_ROWS else "")
    out = ("<h2>Engine utilization (busiest first)</h2>"
           + _table(["engine", "kind", "busy ns", "utilization", "ops", "channels"], rows,
                    {2, 3, 4}) + note)
    io_rows = [(lid, "link", v) for lid, v in (stats.get("links") or {}).items()]
    io_rows += [(mid, "memory", v) for mid, v in (stats.get("memories") or {}).items()]
    if io_rows:
        io_rows.sort(key=lambda r: (-r[2].get("utilization", 0.0), r[0]))
        rows = [f"<tr><td>{_e(i)}</td><td>{kind}</td>"
                f'<td class="n">{_num(v.get("bytes"))}</td>'
                f'<td class="n">{_num(v.get("busy_ns"))}</td>{_bar_cell(v.get("utilization"))}'
                "</tr>" for i, kind, v in io_rows[:MAX_IO_ROWS]]
        more = len(io_rows) - MAX_IO_ROWS
        out += ("<h2>Links and memories (busiest first)</h2>"
                '<p class="note">HBM utilization is that of its busiest channel</p>'
                + _table(["component", "kind", "bytes", "busy ns", "utilization"], rows,
                         {2, 3, 4})
                + (f'<p class="note">{more} more in stats.json</p>' if more > 0 else ""))
    return out


def _img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">'


def render_plots(stats: dict[str, Any], trace: dict[str, Any] | None = None,
                 topology: Topology | None = None) -> dict[str, bytes]:
    """PNG bytes of the plots whose data exists: `engine_timeline` (needs a trace with
    engine spans), `utilization`, `roofline` (needs stats["layers"] with a MAC layer;
    roofs from the topology, else recovered from the layers' bounds), `energy_by_kind`
    (needs stats["energy"]) and `energy_per_layer` (needs per-layer energy)."""
    out: dict[str, bytes] = {}
    if trace:
        data = plots.timeline_png(trace)
        if data:
            out["engine_timeline"] = data
    data = plots.utilization_png(stats)
    if data:
        out["utilization"] = data
    data = energy_plots.energy_kind_png(stats)
    if data:
        out["energy_by_kind"] = data
    data = energy_plots.energy_layers_png(stats)
    if data:
        out["energy_per_layer"] = data
    if stats.get("layers"):
        peaks = (plots.peaks_from_topology(topology) if topology is not None
                 else plots.peaks_from_stats(stats))
        data = plots.roofline_png(stats, peaks)
        if data:
            out["roofline"] = data
    return out


_PLOT_TITLES = {"engine_timeline": "Engine timeline", "utilization": "Utilization",
                "roofline": "Roofline (per layer)",
                "energy_by_kind": "Energy by component kind",
                "energy_per_layer": "Energy per layer (by component kind)"}


def render_report(stats: dict[str, Any], trace: dict[str, Any] | None = None,
                  verdict: Mapping[str, Any] | None = None, topology: Topology | None = None,
                  title: str | None = None, plot_png: dict[str, bytes] | None = None) -> str:
    """The report page as a string (see write_report)."""
    if plot_png is None:
        plot_png = render_plots(stats, trace, topology)
    title = title or f"kernbench report — {stats.get('topology', '')}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", _headline(stats, topology)]
    if verdict is not None:
        parts.append(_verdict_section(verdict))
    if "llm" in stats:

        parts.append(llm_html(stats["llm"], stats.get("replay")))
    parts.append(_layers_section(stats))
    parts.append(_engines_section(stats))
    if "entry_count" in stats:
        parts.append(f'<p class="note">{_num(stats["entry_count"])} CMDQ entries: reported '
                     "from the streamed run, without the per-entry detail (engine timeline, "
                     "critical path, cost-model estimate); `--entries` or `--trace` keeps "
                     "it (docs/stats.md)</p>")
    if plot_png:
        parts.append("<h2>Plots</h2>")
        for key in ("engine_timeline", "utilization", "roofline", "energy_by_kind",
                    "energy_per_layer"):
            if key in plot_png:
                parts.append(f"<h3>{_e(_PLOT_TITLES[key])}</h3>"
                             + _img(plot_png[key], _PLOT_TITLES[key]))
    parts.append('<p class="note">schema: docs/stats.md · trace.json opens in '
                 "ui.perfetto.dev · generated by kernbench</p></body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def write_report(out_dir: str | Path, stats: dict[str, Any], trace: dict[str, Any] | None = None,
                 verdict: Mapping[str, Any] | None = None, topology: Topology | None = None,
                 title: str | None = None, *,
                 save_plots: bool = False) -> Path:
    """Write `out_dir/report.html`: headline numbers, verification verdict (host.verify.Verdict's
    to_json() dict), slowest layers, engine / link / memory utilization and the plots whose
    data exists, all in one self-contained page. `topology` (a kernbench Topology) gives the
    roofline's roofs and the topology line; without it the roofs are recovered from the
    layers' bounds. With `save_plots` the PNGs are also written next to the page
    (engine_timeline.png, utilization.png, roofline.png, energy_by_kind.png,
    energy_per_layer.png). Returns the page's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = render_plots(stats, trace, topology)
    page = render_report(stats, trace, verdict, topology, title, plot_png=png)
    path = out / "report.html"
    tmp = out / "report.html.tmp"
    tmp.write_text(page, encoding="utf-8", newline="\n")
    tmp.replace(path)
    if save_plots:
        for key, data in png.items():
            p = out / f"{key}.png"
            p.with_name(p.name + ".tmp").write_bytes(data)
            p.with_name(p.name + ".tmp").replace(p)
    return path
