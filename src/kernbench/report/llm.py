"""The LLM figures of stats.json's `llm` section as text lines and as an HTML block
(the section itself is computed by kernbench.host.llm; schema in docs/stats.md)."""

from __future__ import annotations

from html import escape
from typing import Any

from kernbench.report.units import fmt_rate, fmt_time


def llm_lines(s: dict[str, Any]) -> list[str]:
    """The LLM figures as summary lines (stdout, summary.txt, report.html). The bottleneck
    and the run's bound verdict are the summary's own line (report.verdict), not repeated."""
    gib = 2**30
    lines = [f"LLM {s['model']}: {s['phase']}, {s['layers']} layers, batch {s['batch']}, "
             f"{s['seq_len']} new token(s) after {s['kv_len']} cached"]
    if s["phase"] == "prefill":
        lines.append(f"time to first token {fmt_time(s['ttft_ns'])}; prefill "
                     f"{fmt_rate(s['prefill_tokens_per_s'], 'tokens')} (batch × seq / step)")
    else:
        lines.append(f"time per output token {fmt_time(s['tpot_ns'])}; decode "
                     f"{fmt_rate(s['decode_tokens_per_s'], 'tokens')} (× batch {s['batch']})")
    r = s["roofline"]
    peak = _peaks_text(r.get("peaks") or [])
    lines.append(f"step roofline fraction {r['fraction']:.3f} (whole-step bound / step): bound "
                 f"{fmt_time(r['bound_ns'])} = max(compute {fmt_time(r['compute_bound_ns'])}: "
                 f"MACs at the {peak}, memory {fmt_time(r['memory_bound_ns'])}: weights, "
                 "embedding rows gathered and KV cache at the peak HBM bandwidth)")
    lines.append(f"peak HBM bandwidth fraction {r['hbm_bandwidth_fraction']:.3f} (bytes read "
                 f"per step time / peak), peak MAC rate fraction "
                 f"{r['mac_rate_fraction']:.3f} (MACs per step time / {peak})")
    h = s["hbm"]
    lines.append(f"weights {s['weight_bytes'] / gib:.2f} GiB ({s['params'] / 1e9:.2f} B params) "
                 f"+ KV cache {s['kv_cache_bytes'] / gib:.3f} GiB = "
                 f"{100 * h['fraction']:.1f}% of {h['capacity_bytes'] / gib:g} GiB HBM"
                 + (" — WARNING: little room left" if h["warning"] else " (fits)"))
    return lines


def _peaks_text(peaks: list[str]) -> str:
    """'int8 peak', 'int8 and fp32 peaks' (each layer's MACs at its width's peak)."""
    if len(peaks) == 1:
        return f"{peaks[0]} peak"
    if not peaks:
        return "peak"
    return f"{', '.join(peaks[:-1])} and {peaks[-1]} peaks"


def llm_html(s: dict[str, Any], replay: dict[str, Any] | None = None) -> str:
    """An <h2> section for report.html with the same lines, plus the replay note."""
    items = "".join(f"<li>{escape(line)}</li>" for line in llm_lines(s))
    if replay:
        items += (f"<li>{escape(str(replay['simulated_blocks']))} of "
                  f"{escape(str(replay['blocks']))} identical blocks simulated, the rest "
                  f"replayed (period {fmt_time(replay['block_period_ns'])}); per-layer tables "
                  "cover the simulated blocks</li>")
    return f"<h2>LLM</h2><ul>{items}</ul>"
