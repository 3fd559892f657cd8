"""`kernbench run MODEL --generate N`: a prompt, then decode steps with a growing KV cache.

A generation of N new tokens is one prefill (batch B, the prompt's P tokens, nothing cached:
it emits the first token, so its time is the TTFT) and N − 1 decode steps, step i (1-based)
with batch B, one new token and P + i − 1 cached tokens (the convention of `serve`'s
`output_tokens` and of `max_new_tokens`: every generated token counts, the first included).

The prefill is the ordinary `run` of the command (its stats.json, report and tables). Each
decode step is a program compiled and simulated like `run --kv-len K --no-report`
(`host.serve.model.ServedModel.run`). With `exact` every step is simulated; otherwise
a step's time and its energy each come from the serving layer's bucket rule
(`host.serve.buckets.interpolate`: exact up to 16 cached tokens, then linear between
edges at most 6.25 % apart, an interval trusted only once its edges' times agree or its
simulated midpoint lies on the chord), and every program is simulated once
(docs/serving.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernbench.host.serve.buckets import interpolate
from kernbench.topology.model import Topology

Shape = tuple[int, int, int]  # (batch, new tokens, past tokens)


@dataclass
class StepMemo:
    """(ns, pJ) of a program shape: simulated once per shape (`run(shape)` → stats), and
    interpolated by the serving bucket rule unless `exact`."""

    run: Callable[[Shape], dict[str, Any]]
    exact: bool = False
    simulated: dict[Shape, tuple[float, float]] = field(default_factory=dict)

    def _sim(self, shape: Shape) -> tuple[float, float]:
        got = self.simulated.get(shape)
        if got is None:
            stats = self.run(shape)
            got = (float(stats["total_ns"]), float(stats["energy"]["total_pj"]))
            self.simulated[shape] = got
        return got

    def step(self, shape: Shape) -> tuple[float, float]:
        """(ns, pJ) of one program of `shape`."""
        if self.exact:
            return self._sim(shape)
        ns = interpolate(shape, lambda s: self._sim(s)[0])  # type: ignore[arg-type]
        pj = interpolate(shape, lambda s: self._sim(s)[1])  # type: ignore[arg-type]
        return ns, pj


def generation_section(prefill: dict[str, Any], memo: StepMemo, batch: int, prompt: int,
                       new_tokens: int, note: Callable[[str], None] | None = None
                       ) -> dict[str, Any]:
    """stats.json's `generation` (docs/stats.md) from the prefill's stats and the decode
    steps' figures."""
    steps = []
    for i in range(1, new_tokens):
        kv = prompt + i - 1
        if note is not None and (batch, 1, kv) not in memo.simulated:
            note(f"generate: decode step {i} of {new_tokens - 1} ({kv} cached tokens)")
        steps.append((kv, *memo.step((batch, 1, kv))))
    ttft = float(prefill["total_ns"])
    e_prefill = float(prefill["energy"]["total_pj"])
    decode_ns = sum(t for _, t, _ in steps)
    total = ttft + decode_ns
    energy = e_prefill + sum(e for _, _, e in steps)
    tokens = batch * new_tokens
    return {
        "batch": batch, "prompt_tokens": prompt, "new_tokens": new_tokens,
        "decode_steps": len(steps), "step_rule": "exact" if memo.exact else "buckets",
        "programs_simulated": len(memo.simulated),
        "ttft_ns": round(ttft, 3),
        "tpot_ns": [round(t, 3) for _, t, _ in steps],
        "kv_lens": [kv for kv, _, _ in steps],
        "tpot_mean_ns": round(decode_ns / len(steps), 3) if steps else None,
        "generation_ns": round(total, 3),
        "tokens_per_s": round(tokens * 1e9 / total, 3) if total else None,
        "decode_tokens_per_s": (round(batch * len(steps) * 1e9 / decode_ns, 3)
                                if decode_ns else None),
        "prefill_energy_pj": round(e_prefill, 3),
        "decode_energy_pj": [round(e, 3) for _, _, e in steps],
        "energy_pj": round(energy, 3),
        "energy_per_token_pj": round(energy / tokens, 3),
    }


def generation_csv(gen: dict[str, Any]) -> str:
    """generation.csv: the prefill (step 0) and one row per decode step."""
    lines = ["step,phase,new_tokens,kv_len,ns,energy_pj"]
    lines.append(f"0,prefill,{gen['prompt_tokens']},0,{gen['ttft_ns']!r},"
                 f"{gen['prefill_energy_pj']!r}")
    for i, (kv, t, e) in enumerate(zip(gen["kv_lens"], gen["tpot_ns"], gen["decode_energy_pj"],
                                       strict=True), start=1):
        lines.append(f"{i},decode,1,{kv},{t!r},{e!r}")
    return "\n".join(lines) + "\n"


def generation_memo(model: Any, topo: Topology, exact: bool) -> StepMemo:
    """The memo of decode programs of `model` (a host.serve.model.ServedModel) on `topo`."""
    return StepMemo(lambda shape: model.run(shape, topo), exact)
