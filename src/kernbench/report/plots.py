"""Plots of a run: engine timeline (Gantt), utilization bars, per-layer roofline.

Every plot is drawn on its own `matplotlib.figure.Figure` with an Agg canvas created inside
the function: nothing here touches `pyplot`, selects a global backend or leaks figures,
and matplotlib is imported only when a plot is drawn. Drawing happens under matplotlib's
default style (a user's matplotlibrc does not change the picture) at a fixed size and dpi,
and PNGs are saved without the "Software" metadata, so the same inputs give byte-identical
PNG files.

Each public function writes a PNG to `path` (a file path or a binary file object) and
returns `path`, or returns None and writes nothing when its data is absent (a trace
without engine spans, stats without layers or without any layer that does MACs).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from kernbench.topology.peaks import Roofs, roofs

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn
    from matplotlib.figure import Figure

    from kernbench.topology.model import Topology

DPI = 100
MAX_TIMELINE_ROWS = 32
MAX_UTIL_BARS = 24
WIDTH_IN = 12.0

# fixed colours per trace category (StageType names); anything else is grey
STAGE_COLORS = {
    "DMA_READ": "#1f77b4", "FETCH": "#17becf", "GEMM": "#d62728", "MATH": "#ff7f0e",
    "STORE": "#2ca02c", "DMA_WRITE": "#9467bd",
}
OTHER_COLOR = "#7f7f7f"

PathLike = str | Path | IO[bytes]


# ---------------------------------------------------------------------------- helpers
def _new_figure(width: float, height: float) -> Any:
    # why: matplotlib is heavy and optional: imported only when a plot is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)  # Agg for this figure only; the global backend is untouched
    return fig


def _png(builder: Callable[..., Figure | None], *args: object) -> bytes | None:
    """Build a figure and render it to PNG bytes under matplotlib's default style (the
    user's matplotlibrc does not change the picture); None when the builder has no data."""
    # why: matplotlib is heavy and optional: imported only when a plot is drawn
    import matplotlib.style

    with matplotlib.style.context("default"):
        fig = builder(*args)
        if fig is None:
            return None
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _write(data: bytes | None, path: PathLike) -> PathLike | None:
    if data is None:
        return None
    if isinstance(path, str | Path):
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(p)
        return p
    path.write(data)
    return path


def _strip_common_prefix(labels: list[str]) -> list[str]:
    """Drop the dotted prefix all labels share (`sip0.cube0.`) when it leaves them distinct."""
    if len(labels) < 2:
        return labels
    parts = [s.split(".") for s in labels]
    n = 0
    while all(len(p) > n + 1 and p[n] == parts[0][n] for p in parts):
        n += 1
    out = [".".join(p[n:]) for p in parts]
    return out if len(set(out)) == len(set(labels)) else labels


def _time_unit(total_ns: float) -> tuple[str, float]:
    if total_ns >= 1e8:
        return "ms", 1e-6
    if total_ns >= 1e5:
        return "µs", 1e-3
    return "ns", 1.0


def _fmt(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


# ---------------------------------------------------------------------- engine timeline
def _timeline_rows(trace: dict[str, Any]) -> tuple[dict[tuple[int, int], str], dict]:
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    procs: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    spans: dict[tuple[int, int], dict[str, list[tuple[float, float]]]] = {}
    for e in events:
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") == "process_name":
                procs[e.get("pid", 0)] = str(e.get("args", {}).get("name", ""))
            elif e.get("name") == "thread_name":
                threads[(e.get("pid", 0), e.get("tid", 0))] = str(e.get("args", {}).get("name", ""))
        elif ph == "X" and e.get("cat") != "command":  # command lifetimes are not engine work
            key = (e.get("pid", 0), e.get("tid", 0))
            cat = str(e.get("cat", ""))
            ts = float(e.get("ts", 0.0)) * 1000.0  # µs → ns
            dur = float(e.get("dur", 0.0)) * 1000.0
            spans.setdefault(key, {}).setdefault(cat, []).append((ts, dur))
    names = {}
    for key in spans:
        pid, tid = key
        names[key] = (f"{procs.get(pid, f'pid{pid}')}."
                      f"{threads.get(key, f'tid{tid}')}")
    return names, spans


def _merge(spans: list[tuple[float, float]], eps: float) -> list[tuple[float, float]]:
    """Merge spans closer than eps (sub-pixel gaps): bounded rectangles per row."""
    spans = sorted(spans)
    out: list[list[float]] = []
    for s, d in spans:
        if out and s - (out[-1][0] + out[-1][1]) <= eps:
            out[-1][1] = max(out[-1][1], s + d - out[-1][0])
        else:
            out.append([s, d])
    return [(s, d) for s, d in out]


def _timeline_fig(trace: dict[str, Any], max_rows: int) -> Any:
    names, spans = _timeline_rows(trace)
    if not spans:
        return None
    busy = {k: sum(d for v in cats.values() for _, d in v) for k, cats in spans.items()}
    pe_busy: dict[int, float] = {}
    for (pid, _), b in busy.items():
        pe_busy[pid] = pe_busy.get(pid, 0.0) + b
    # whole PEs, busiest first, while their channels fit; a PE with more channels than
    # max_rows keeps its busiest ones
    chosen: list[tuple[int, int]] = []
    n_pes = 0
    for pid in sorted(pe_busy, key=lambda p: (-pe_busy[p], p)):
        rows = sorted((k for k in spans if k[0] == pid), key=lambda k: (-busy[k], k))
        if chosen and len(chosen) + len(rows) > max_rows:
            break
        chosen.extend(rows[:max_rows])
        n_pes += 1
    chosen.sort()  # rows in PE / channel order
    end = max(s + d for cats in spans.values() for v in cats.values() for s, d in v)
    end = end if end > 0 else 1.0
    unit, scale = _time_unit(end)
    labels = _strip_common_prefix([names[k] for k in chosen])
    n = len(chosen)
    fig = _new_figure(WIDTH_IN, 1.6 + 0.26 * n)
    ax = fig.add_subplot(1, 1, 1)
    eps = end / 4000.0
    cats_seen: set[str] = set()
    for row, key in enumerate(chosen):
        y = n - 1 - row
        for cat in sorted(spans[key]):
            cats_seen.add(cat)
            bars = [(s * scale, d * scale) for s, d in _merge(spans[key][cat], eps)]
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=STAGE_COLORS.get(cat, OTHER_COLOR),
                           linewidth=0)
    ax.set_yticks(range(n))
    ax.set_yticklabels(list(reversed(labels)), fontsize=7)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(0, end * scale)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    total = len(spans)
    if total > n:
        shown = (f"{n} of {total} engine channels: the busiest {n_pes} of {len(pe_busy)} PEs"
                 if n_pes > 1 else f"busiest {n} of {total} engine channels")
    else:
        shown = f"all {total} engine channels"
    ax.set_title(f"engine timeline — {shown}", fontsize=10, loc="left")
    # why: matplotlib is heavy and optional: imported only when a plot is drawn
    from matplotlib.patches import Patch

    order = [c for c in STAGE_COLORS if c in cats_seen] + sorted(cats_seen - set(STAGE_COLORS))
    handles = [Patch(color=STAGE_COLORS.get(c, OTHER_COLOR), label=c) for c in order]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2,
              ncol=len(handles), fontsize=7, frameon=False, handlelength=1.2,
              columnspacing=1.0)
    fig.tight_layout()
    return fig


def engine_timeline(trace: dict[str, Any], path: PathLike,
                    max_rows: int = MAX_TIMELINE_ROWS) -> PathLike | None:
    """Gantt chart of engine busy spans, one row per PE engine channel (trace X events that
    are not command lifetimes), coloured by stage. At most `max_rows` rows: whole PEs,
    busiest first (total busy time of their channels), as many as fit, so that a PE's DMA,
    fetch / store, GEMM and math channels are seen side by side; the title says how many
    channels and PEs of how many are shown."""
    return _write(timeline_png(trace, max_rows), path)


def timeline_png(trace: dict[str, Any], max_rows: int = MAX_TIMELINE_ROWS) -> bytes | None:
    """engine_timeline as PNG bytes (None without engine spans)."""
    return _png(_timeline_fig, trace, max_rows)


# --------------------------------------------------------------------------- utilization
def _util_rows(stats: dict[str, Any]) -> tuple[list[tuple[str, float]], list[tuple[str, float,
                                                                                     str]]]:
    eng: list[tuple[str, float]] = []
    for cid, e in stats.get("engines", {}).items():
        chans = e.get("channels")
        if chans:
            eng.extend((f"{cid}.{ch}", float(c.get("utilization", 0.0)))
                       for ch, c in chans.items())
        else:
            eng.append((cid, float(e.get("utilization", 0.0))))
    io_rows: list[tuple[str, float, str]] = []
    for lid, link in stats.get("links", {}).items():
        io_rows.append((lid, float(link.get("utilization", 0.0)), "link"))
    for mid, m in stats.get("memories", {}).items():
        chans = m.get("channels")
        if chans:
            io_rows.extend((ch, float(c.get("utilization", 0.0)), "HBM channel")
                           for ch, c in chans.items())
        else:
            io_rows.append((mid, float(m.get("utilization", 0.0)), "memory"))
    return eng, io_rows


def _util_fig(stats: dict[str, Any], max_bars: int) -> Any:
    eng, io_rows = _util_rows(stats)
    if not eng and not io_rows:
        return None
    eng_top = sorted(eng, key=lambda r: (-r[1], r[0]))[:max_bars]
    io_top = sorted(io_rows, key=lambda r: (-r[1], r[0]))[:max_bars]
    n = max(len(eng_top), len(io_top), 1)
    fig = _new_figure(WIDTH_IN, 1.4 + 0.24 * n)
    kind_color = {"link": "#8c564b", "HBM channel": "#e377c2", "memory": "#bcbd22"}
    panels = [
        (eng_top, len(eng), "engine channels", [STAGE_COLORS["GEMM"]] * len(eng_top)),
        (io_top, len(io_rows), "links and memories",
         [kind_color[r[2]] for r in io_top]),
    ]
    for i, (rows, total, what, colors) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        if not rows:
            ax.set_axis_off()
            ax.set_title(f"no {what}", fontsize=10)
            continue
        labels = _strip_common_prefix([r[0] for r in rows])
        ys = list(range(len(rows)))[::-1]
        vals = [100.0 * r[1] for r in rows]
        ax.barh(ys, vals, color=colors if i else "#1f77b4", height=0.7)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlim(0, 100)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xlabel("utilization (%)")
        ax.grid(axis="x", alpha=0.3)
        for y, v in zip(ys, vals, strict=True):
            ax.text(min(v + 1, 88), y, f"{v:.1f}%", va="center", fontsize=6)
        shown = f"busiest {len(rows)} of {total}" if total > len(rows) else f"all {total}"
        ax.set_title(f"{what} — {shown}", fontsize=10)
        if i:
            # why: matplotlib is heavy and optional: imported only when a plot is drawn
            from matplotlib.patches import Patch

            kinds = sorted({r[2] for r in rows})
            ax.legend(handles=[Patch(color=kind_color[k], label=k) for k in kinds],
                      loc="lower right", fontsize=7)
    fig.tight_layout()
    return fig


def utilization(stats: dict[str, Any], path: PathLike,
                max_bars: int = MAX_UTIL_BARS) -> PathLike | None:
    """Horizontal bars: the busiest engine channels (left) and the busiest links, HBM
    channels and other memories (right), utilization in % of the run."""
    return _write(utilization_png(stats, max_bars), path)


def utilization_png(stats: dict[str, Any], max_bars: int = MAX_UTIL_BARS) -> bytes | None:
    """utilization as PNG bytes (None without engines, links or memories)."""
    return _png(_util_fig, stats, max_bars)


# ------------------------------------------------------------------------------ roofline
def peaks_from_topology(topology: Topology) -> Roofs:
    """The roofs of kernbench.compiler.roofline for 8-bit operands (topology.peaks.roofs):
    all PEs' array MACs per ns and aggregate HBM GB/s (= bytes per ns)."""
    return roofs(topology, 8)


def peaks_from_stats(stats: dict[str, Any]) -> Roofs | None:
    """Roofs recovered from the per-layer bounds (no topology at hand): HBM GB/s = bytes /
    memory_bound_ns of the layer moving the most bytes; peak MACs/ns = MACs /
    compute_bound_ns of the layer with the most MACs (that layer's operand bitwidth)."""
    layers = stats.get("layers") or {}
    hbm = peak = None
    mem = [v for v in layers.values() if v.get("bytes") and v.get("memory_bound_ns")]
    if mem:
        v = max(mem, key=lambda v: (v["bytes"], v["memory_bound_ns"]))
        hbm = v["bytes"] / v["memory_bound_ns"]
    comp = [v for v in layers.values() if v.get("macs") and v.get("compute_bound_ns")]
    if comp:
        v = max(comp, key=lambda v: (v["macs"], v["compute_bound_ns"]))
        peak = v["macs"] / v["compute_bound_ns"]
    return Roofs(peak, hbm) if (hbm or peak) else None


def _roofline_points(stats: dict[str, Any]) -> tuple[list[tuple[str, str, float, float, float]],
                                                     int]:
    pts = []
    skipped = 0
    for lid, v in sorted((stats.get("layers") or {}).items()):
        macs, nbytes, ns = v.get("macs", 0), v.get("bytes", 0), v.get("ns", 0.0)
        if not macs or not nbytes or not ns:
            skipped += 1
            continue
        pts.append((lid, str(v.get("op_type", "?")), 2.0 * macs / nbytes, 2.0 * macs / ns, ns))
    return pts, skipped


def _roofline_fig(stats: dict[str, Any], peaks: Roofs | None) -> Any:
    pts, skipped = _roofline_points(stats)
    if not pts:
        return None
    peaks = peaks or Roofs(None, None)
    peak_ops = 2.0 * float(peaks.peak_macs_per_ns) if peaks.peak_macs_per_ns else None
    bw = float(peaks.hbm_gbs) if peaks.hbm_gbs else None
    xs = [p[2] for p in pts]
    ys = [p[3] for p in pts]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if peak_ops and bw:
        ridge = peak_ops / bw
        x_lo, x_hi = min(x_lo, ridge), max(x_hi, ridge)
    if peak_ops:
        y_hi = max(y_hi, peak_ops)
    x_lo, x_hi = x_lo / 4.0, x_hi * 4.0
    y_lo, y_hi = y_lo / 4.0, y_hi * 3.0
    fig = _new_figure(9.0, 6.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if peak_ops or bw:
        gx = np.geomspace(x_lo, x_hi, 256)
        roof = np.full_like(gx, np.inf)
        if bw:
            roof = np.minimum(roof, bw * gx)
        if peak_ops:
            roof = np.minimum(roof, peak_ops)
        ax.plot(gx, roof, color="black", linewidth=1.5, zorder=2)
        if peak_ops:
            ax.text(x_hi / 1.3, peak_ops * 1.12, f"compute roof {_fmt(peak_ops)} ops/ns",
                    ha="right", va="bottom", fontsize=8)
        if bw:
            xt = x_lo * 1.5
            ax.text(xt, bw * xt / 1.6, f"HBM roof {_fmt(bw)} GB/s", ha="left", va="top",
                    fontsize=8)
    # why: matplotlib is heavy and optional: imported only when a plot is drawn
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    ops = sorted({p[1] for p in pts})
    for i, op in enumerate(ops):
        sel = [p for p in pts if p[1] == op]
        ax.scatter([p[2] for p in sel], [p[3] for p in sel], s=28, color=cmap(i % 10),
                   label=op, zorder=3, edgecolors="black", linewidths=0.4)
    notes: list[tuple[float, float, list[str]]] = []  # the slowest layers, close ones merged
    for lid, _, x, y, _ in sorted(pts, key=lambda p: (-p[4], p[0]))[:4]:
        near = next((a for a in notes if abs(math.log10(a[0] / x)) < 0.05
                     and abs(math.log10(a[1] / y)) < 0.1), None)
        if near is None:
            notes.append((x, y, [lid]))
        else:
            near[2].append(lid)
    for x, y, lids in notes:
        ax.annotate(", ".join(lids), (x, y), xytext=(5, -9), textcoords="offset points",
                    fontsize=6)
    total_macs = sum(v.get("macs", 0) for v in stats["layers"].values())
    total_bytes = sum(v.get("bytes", 0) for v in stats["layers"].values())
    replay = stats.get("replay") or {}
    if "model_macs" in replay:  # the layers are the simulated blocks only: the whole model
        total_macs, total_bytes = replay["model_macs"], replay["model_bytes"]
    if total_macs and total_bytes and stats.get("total_ns"):
        mx, my = 2.0 * total_macs / total_bytes, 2.0 * total_macs / stats["total_ns"]
        ax.scatter([mx], [my], marker="*", s=160, color="gold", edgecolors="black",
                   linewidths=0.6, zorder=4, label="whole model (Σ layers, total ns)")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("operational intensity (2·MACs / HBM byte)")
    ax.set_ylabel("achieved ops/ns (2·MACs / layer ns)")
    ax.grid(True, which="both", alpha=0.25)
    note = f"; {skipped} layers without MACs (or bytes) not shown" if skipped else ""
    ax.set_title(f"roofline — {len(pts)} layers with MACs{note}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def roofline(stats: dict[str, Any], topology_peaks: Roofs | None,
             path: PathLike) -> PathLike | None:
    """Per-layer roofline: x = 2·MACs / bytes, y = 2·MACs / ns for every layer that does
    MACs (element-wise and data-movement layers are skipped, and counted in the title),
    plus the whole model as a star; roofs from `topology_peaks`
    (topology.peaks.Roofs, e.g. `peaks_from_topology(topo)`); a roof whose
    peak is missing is not drawn. None when stats has no layer with MACs."""
    return _write(roofline_png(stats, topology_peaks), path)


def roofline_png(stats: dict[str, Any], topology_peaks: Roofs | None) -> bytes | None:
    """roofline as PNG bytes (None without a layer that does MACs)."""
    return _png(_roofline_fig, stats, topology_peaks)
