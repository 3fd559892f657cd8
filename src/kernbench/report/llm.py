"""The LLM figures of stats.json's `llm` section as text lines and as an HTML block
(the section itself is computed by kernbench.host.llm; schema in docs/stats.md)."""

from __future__ import annotations

from html import escape
from typing import Any


def llm_lines(s: dict[str, Any]) -> list[str]:
    """The LLM figures as summary lines (stdout and summary.txt)."""
    gib = 2**30
    lines = [f"LLM {s['model']}: {s['phase']}, {s['layers']} layers, batch {s['batch']}, "
             f"{s['seq_len']} new token(s) after {s['kv_len']} cached"]
    if s["phase"] == "prefill":
        lines.append(f"time to first token {s['ttft_ns'] / 1e6:.3f} ms; prefill "
                     f"{s['prefill_tokens_per_s']:,.0f} tokens/s (batch × seq / step)")
    else:
        lines.append(f"time per output token {s['tpot_ns'] / 1e6:.3f} ms; decode "
                     f"{s['decode_tokens_per_s']:,.0f} tokens/s (× batch {s['batch']})")
    b, r = s["bottleneck"], s["roofline"]
    lines.append(f"{s['phase']} bottleneck: {b['component']} ({b['kind']}); the step is "
                 f"{b['bound_by']}-bound: roofline {r['bound_ns'] / 1e6:.3f} ms "
                 f"(compute {r['compute_bound_ns'] / 1e6:.3f}, memory "
                 f"{r['memory_bound_ns'] / 1e6:.3f}), {100 * r['fraction']:.1f}% of it reached")
    h = s["hbm"]
    lines.append(f"weights {s['weight_bytes'] / gib:.2f} GiB ({s['params'] / 1e9:.2f} B params) "
                 f"+ KV cache {s['kv_cache_bytes'] / gib:.3f} GiB = "
                 f"{100 * h['fraction']:.1f}% of {h['capacity_bytes'] / gib:g} GiB HBM"
                 + (" — WARNING: little room left" if h["warning"] else " (fits)"))
    return lines


def llm_html(s: dict[str, Any], replay: dict[str, Any] | None = None) -> str:
    """An <h2> section for report.html with the same lines, plus the replay note."""
    items = "".join(f"<li>{escape(line)}</li>" for line in llm_lines(s))
    if replay:
        items += (f"<li>{escape(str(replay['simulated_blocks']))} of "
                  f"{escape(str(replay['blocks']))} identical blocks simulated, the rest "
                  f"replayed (period {replay['block_period_ns']:,.1f} ns); per-layer tables "
                  "cover the simulated blocks</li>")
    return f"<h2>LLM</h2><ul>{items}</ul>"
