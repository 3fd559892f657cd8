"""stats.json's `generation` section (`run --generate N`; computed by
kernbench.host.generate, schema in docs/stats.md) as summary lines in human units."""

from __future__ import annotations

from typing import Any

from kernbench.report.energy import fmt_energy


def fmt_ns(ns: float) -> str:
    """ns in the largest unit (ns, µs, ms, s) the value reaches, two decimals above ns."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:,.2f} {unit}"
    return f"{ns:,.0f} ns"


def generation_lines(g: dict[str, Any]) -> list[str]:
    """The generation figures as summary lines (stdout and summary.txt)."""
    lines = [f"generation: batch {g['batch']}, prompt {g['prompt_tokens']} tokens, "
             f"{g['new_tokens']} new tokens (the prefill's + {g['decode_steps']} decode steps; "
             f"step times {g['step_rule']}, {g['programs_simulated']} decode programs "
             "simulated)",
             f"TTFT {fmt_ns(g['ttft_ns'])}"]
    if g["tpot_ns"]:
        lines[-1] += (f", TPOT mean {fmt_ns(g['tpot_mean_ns'])} (first "
                      f"{fmt_ns(g['tpot_ns'][0])}, last {fmt_ns(g['tpot_ns'][-1])})")
    lines.append(f"{g['batch'] * g['new_tokens']} tokens in {fmt_ns(g['generation_ns'])}: "
                 f"{g['tokens_per_s']:,.1f} tokens/s"
                 + (f" (decode alone {g['decode_tokens_per_s']:,.1f} tokens/s)"
                    if g["decode_tokens_per_s"] else ""))
    lines.append(f"energy {fmt_energy(g['energy_pj'])} = "
                 f"{fmt_energy(g['energy_per_token_pj'])} per generated token (prefill "
                 f"{fmt_energy(g['prefill_energy_pj'])})")
    return lines
