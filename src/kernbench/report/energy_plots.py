"""Energy charts for the HTML report: by component kind, and per layer by component kind.

Both read stats.json only (`energy.by_component_kind`, `layers[*].energy_by_kind_pj`), so
they can be redrawn from a saved run. matplotlib is imported lazily inside the figure
helpers of kernbench.report.plots (an optional heavy dependency there too).
"""

from __future__ import annotations

from typing import Any

from kernbench.report.plots import WIDTH_IN, _new_figure, _png

MAX_LAYER_BARS = 24
# one colour per component kind (and static), stable across charts
KIND_COLORS = {
    "hbm_ctrl": "#e377c2", "pe_tcm": "#bcbd22", "pe_gemm": "#1f77b4", "pe_math": "#ff7f0e",
    "pe_fetch_store": "#2ca02c", "router": "#8c564b", "shared_sram": "#17becf",
    "ucie": "#9467bd", "chip_link": "#17becf", "static": "#7f7f7f",
}
OTHER = "#c7c7c7"


def _kind_fig(stats: dict[str, Any]) -> Any:
    e = stats.get("energy") or {}
    rows = sorted(((k, v["dynamic_pj"], v["static_pj"]) for k, v in
                   (e.get("by_component_kind") or {}).items()),
                  key=lambda r: (-(r[1] + r[2]), r[0]))
    if not rows or not e.get("total_pj"):
        return None
    fig = _new_figure(WIDTH_IN, 1.2 + 0.26 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(rows)))[::-1]
    scale = 1e-6  # pJ → µJ
    dyn = [r[1] * scale for r in rows]
    sta = [r[2] * scale for r in rows]
    ax.barh(ys, dyn, color=[KIND_COLORS.get(r[0], OTHER) for r in rows], height=0.7,
            label="dynamic")
    ax.barh(ys, sta, left=dyn, color=KIND_COLORS["static"], height=0.7, label="static")
    ax.set_yticks(ys)
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.set_xlabel("energy (µJ)")
    ax.grid(axis="x", alpha=0.3)
    total = e["total_pj"]
    for y, d, s in zip(ys, dyn, sta, strict=True):
        ax.text(d + s, y, f" {100 * (d + s) / (total * scale):.1f}%", va="center", fontsize=7)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"energy by component kind — total {total * scale:.3g} µJ", fontsize=10)
    fig.tight_layout()
    return fig


def _layer_fig(stats: dict[str, Any], max_bars: int) -> Any:
    layers = {k: v for k, v in (stats.get("layers") or {}).items() if "energy_by_kind_pj" in v}
    if not layers:
        return None
    top = sorted(layers.items(), key=lambda kv: (-kv[1]["energy_pj"], kv[0]))[:max_bars]
    kinds = sorted({k for _, v in top for k in v["energy_by_kind_pj"]},
                   key=lambda k: (k == "static", k))
    fig = _new_figure(WIDTH_IN, 1.6 + 0.24 * len(top))
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(top)))[::-1]
    left = [0.0] * len(top)
    scale = 1e-3  # pJ → nJ
    for kind in kinds:
        vals = [v["energy_by_kind_pj"].get(kind, 0.0) * scale for _, v in top]
        ax.barh(ys, vals, left=left, color=KIND_COLORS.get(kind, OTHER), height=0.7,
                label=kind)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{lid} ({v['op_type']})" for lid, v in top], fontsize=7)
    ax.set_xlabel("energy (nJ)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7, ncol=2)
    shown = f"top {len(top)} of {len(layers)}" if len(layers) > len(top) else f"all {len(top)}"
    ax.set_title(f"energy per layer by component kind — {shown}", fontsize=10)
    fig.tight_layout()
    return fig


def energy_kind_png(stats: dict[str, Any]) -> bytes | None:
    """Horizontal bars of dynamic + static energy per component kind (None without energy)."""
    return _png(_kind_fig, stats)


def energy_layers_png(stats: dict[str, Any], max_bars: int = MAX_LAYER_BARS) -> bytes | None:
    """Stacked bars of each layer's energy by component kind, most energy first (None
    without per-layer energy)."""
    return _png(_layer_fig, stats, max_bars)
